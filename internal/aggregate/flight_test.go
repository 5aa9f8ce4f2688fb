package aggregate

import "testing"

// The flight record keeps the last FlightRecord operations completed, oldest first, collectives
// with their root and P2P with their peer.
func TestFlightRecordKeepsTheLast(t *testing.T) {
	var p progress
	if got := p.flight(); len(got) != 0 {
		t.Fatalf("empty progress: %v", got)
	}
	for i := 0; i < FlightRecord+4; i++ {
		o := &Op{Func: "AllReduce", Dtype: "ncclFloat32", Seq: uint64(i), Count: 100, Peer: -1, Root: 0}
		if i%5 == 4 {
			o = &Op{Func: "Send", Dtype: "ncclInt8", Seq: uint64(i / 5), Count: 7, Peer: 3, Root: -1}
		}
		p.done(o)
	}
	got := p.flight()
	if len(got) != FlightRecord || p.ops != FlightRecord+4 {
		t.Fatalf("%d kept of %d done", len(got), p.ops)
	}
	for k, c := range got {
		i := k + 4 // the first four gave way
		want := Called{Func: "AllReduce", Dtype: "ncclFloat32", Seq: int64(i), Count: 100, Peer: -1, Root: 0}
		if i%5 == 4 {
			want = Called{P2p: true, Func: "Send", Dtype: "ncclInt8", Seq: int64(i / 5), Count: 7, Peer: 3, Root: -1}
		}
		if c != want {
			t.Errorf("record %d: %+v, want %+v", k, c, want)
		}
	}
}
