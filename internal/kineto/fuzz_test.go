package kineto

import (
	"testing"

	"github.com/ncclprof/ncclprof/internal/testtraces"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// FuzzParse: any input gives a trace or an error (naming the file), never a panic. Seeded with
// the real traces (the small ones whole, the large ones cut to their first 64 KiB) and every
// era's time encoding; as a unit test it runs over that corpus.
func FuzzParse(f *testing.F) {
	for _, p := range testtraces.AllKineto(f) {
		data, err := tracefile.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if len(data) > 64<<10 {
			data = data[:64<<10]
		}
		f.Add(data)
	}
	for _, s := range []string{
		`{"traceEvents":[{"ph":"X","cat":"kernel","name":"ncclKernel_AllReduce","pid":0,"tid":0,"ts":100,"dur":50,"args":{"Comms Id":10159970886766084423}}],"baseTimeNanoseconds":1}`,
		`[{"ph":"X","cat":"Runtime","name":"cudaLaunchKernel","pid":1,"tid":"stream 7","ts":"1716423323009853","dur":1.5e0}]`,
		`{"displayTimeUnit":"ns","traceEvents":[{"ph":"X","ts":1712195495406752.8,"dur":1,"pid":1,"tid":1}]}`,
	} {
		f.Add([]byte(s))
	}
	base := int64(1)
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Parse("fuzz.json", data, Options{Base: &base}, func(e *Event) error {
			e.Comms()
			e.Correlation()
			return nil
		})
		if err == nil {
			tr.Walk(func(*Event) bool { return true })
		} else if err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}
