package ptrace

import (
	"reflect"
	"testing"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/tidwall/gjson"
)

// gjsonArgs is how args were decoded before the scanner of args.go: gjson's ForEach and its
// conversions. fillArgs must read every value the same way.
func gjsonArgs(e *Fields, args string) (bad string) {
	gjson.Parse(args).ForEach(func(k, v gjson.Result) bool {
		ok := true
		h := func() uint64 {
			raw := v.Raw
			if v.Type == gjson.String {
				raw = v.Str
			}
			n, err := jsonscan.Uint(raw)
			ok = err == nil
			return n
		}
		switch k.Str {
		case "id":
			e.ID = h()
		case "parent":
			e.Parent = h()
		case "comm":
			e.Comm = h()
		case "group_api":
			e.GroupAPI = h()
		case "op":
			e.Op = h()
		case "group":
			e.Group = h()
		case "rank":
			e.Rank = int(v.Int())
		case "func":
			e.Func = v.Str
		case "datatype":
			e.Datatype = v.Str
		case "count":
			e.Count = v.Uint()
		case "bytes":
			e.Bytes = v.Uint()
		case "seq":
			e.Seq = v.Int()
		case "algo":
			e.Algo = v.Str
		case "proto":
			e.Proto = v.Str
		case "nchannels":
			e.NChannels = int(v.Int())
		case "channel":
			e.Channel = int(v.Int())
		case "peer":
			e.Peer = int(v.Int())
		case "gpu_start_ns":
			e.GPUStart, _ = jsonscan.Int(v.Raw)
		case "gpu_stop_ns":
			e.GPUStop, _ = jsonscan.Int(v.Raw)
		case "graph_captured":
			e.Graph = v.Bool()
		case "is_send":
			e.IsSend = v.Bool()
		case "trans_size":
			e.TransSize = v.Int()
		case "traced":
			e.Traced = v.Str
		}
		if !ok {
			bad = k.Str
		}
		return ok
	})
	return bad
}

var argSeeds = []string{
	`{"id":"0x0000000000001004","parent":"0x0000000000001003","comm":"0x8ee1ba78d490475c","rank":0,"seq":0,"func":"AllReduce","count":1048576,"datatype":"ncclFloat32","algo":"RING","proto":"LL","nchannels":2,"nwarps":16,"root":0,"bytes":4194304,"interval":"enqueue"}`,
	`{"id":"0x000000000000100b","parent":"0x0000000000001004","channel":0,"gpu_start_ns":"1711964647000094599","gpu_stop_ns":"1711964647000189466","clock":"gpu","op":"0x0000000000001004"}`,
	`{ "id" : "0xAB" , "rank" : "3", "count": 1.5e3, "bytes": -4, "seq": 9007199254740993, "peer": true, "graph_captured": "true" }`,
	`{"id":12,"parent":"12","comm":null,"rank":1}`,
	`{"func":"All\u0052educe","datatype":7,"algo":null,"proto":{"x":[1,"}"]},"channel":[3],"nchannels":-0}`,
	`{"i\u0064":"0x5","gr\"oup":"0x6","group":"0xg"}`,
	`{"count":18446744073709551615,"bytes":"99","seq":-12.7,"graph_captured":1,"rank":1e400}`,
	`{"gpu_start_ns":12,"gpu_stop_ns":"x","op":"0x00000000000000ff","group_api":"0X1F"}`,
	`{}`,
	`{"id":"0x0000000000002001","parent":"0x0000000000001004","channel":1,"peer":3,"nsteps":4,"chunk_size":131072,"trans_size":524288,"is_send":true}`,
	`{"trans_size":"12","is_send":1}`, `{"trans_size":1.9e3,"is_send":"false"}`,
	`{"id":"0x0000000000001004","id":"0x0000000000000009"}`,
	`{"id":"0x0000000000001004","seq":8,"func":"AllReduce","traced":"sampled"}`,
}

func TestArgsMatchGJSON(t *testing.T) {
	for _, a := range argSeeds {
		checkArgs(t, a)
	}
}

func checkArgs(t *testing.T, args string) {
	t.Helper()
	var got, want Fields
	gb, wb := got.fillArgs(args), gjsonArgs(&want, args)
	if gb != wb || !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\nscanner %q %+v\ngjson   %q %+v", args, gb, got, wb, want)
	}
}

// FuzzArgs: on any valid JSON object the scanner reads what gjson reads.
func FuzzArgs(f *testing.F) {
	for _, a := range argSeeds {
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, args string) {
		if len(args) == 0 || args[0] != '{' {
			return
		}
		if end, err := jsonscan.Skip(args, 0); err != nil || end != len(args) {
			return // args are validated before they are decoded
		}
		checkArgs(t, args)
	})
}
