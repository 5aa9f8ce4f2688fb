package jsonscan

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

var objectSeeds = []string{
	`{"External id": 1, "grid": [1024, 1, 1], "est. achieved occupancy %": 100, "stream": 7}`,
	`{ "Collective name" : "allreduce" , "In msg nelems": 1048576, "Process Group Name": 0, "Process Group Ranks": "[0, 1]" }`,
	`{"a\u0062":"x\"y","n":-1.5e3,"t":true,"f":false,"z":null,"o":{"k":[1,{"}":"]"}]},"s":"\\","e":"é"}`,
	`{"dup":1,"dup":"2","Input Dims":[[2,3]],"Input type":["float"]}`,
	`{"big":18446744073709551615,"neg":-9007199254740993,"frac":0.1,"exp":1E400}`,
	`{}`,
	"{\n  \"k\" :\t\"v\"\r\n}",
}

// The walk of a validated object yields gjson's members, and Str, Text and Find read values
// as gjson's Str, String and Get do.
func checkObject(t *testing.T, obj string) {
	t.Helper()
	type member struct{ key, raw, str, text string }
	var want []member
	gjson.Parse(obj).ForEach(func(k, v gjson.Result) bool {
		want = append(want, member{k.Str, v.Raw, v.Str, v.String()})
		return true
	})
	it := NewObject(obj)
	for i := 0; ; i++ {
		k, raw, ok := it.Next()
		if !ok {
			if i != len(want) {
				t.Fatalf("%s: %d members, gjson %d", obj, i, len(want))
			}
			break
		}
		if i >= len(want) {
			t.Fatalf("%s: more members than gjson's %d", obj, len(want))
		}
		got := member{k, raw, Str(raw), Text(raw)}
		if got != want[i] {
			t.Fatalf("%s: member %d %+v, gjson %+v", obj, i, got, want[i])
		}
		// Find gives the first member of that name, as gjson's Get does (compared with Get
		// where the name has none of the characters gjson paths give meaning to).
		first := ""
		for _, m := range want {
			if m.key == k {
				first = m.raw
				break
			}
		}
		v, found := NewObject(obj).Find(k)
		if !found || v != first {
			t.Fatalf("%s: Find(%q) = %q, the first such member is %q", obj, k, v, first)
		}
		if !strings.ContainsAny(k, `.*?|#@!=<>%\{}[]()":,`) && k != "" && v != gjson.Get(obj, k).Raw {
			t.Fatalf("%s: Find(%q) = %q, gjson Get %q", obj, k, v, gjson.Get(obj, k).Raw)
		}
	}
}

func TestObjectMatchesGJSON(t *testing.T) {
	for _, s := range objectSeeds {
		checkObject(t, s)
	}
}

func FuzzObject(f *testing.F) {
	for _, s := range objectSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		if len(obj) == 0 || obj[0] != '{' {
			return
		}
		if end, err := Skip(obj, 0); err != nil || end != len(obj) {
			return // only validated objects are walked
		}
		checkObject(t, obj)
	})
}
