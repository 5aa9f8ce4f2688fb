package collective

import (
	"math"
	"testing"
)

func TestParseKernelEveryEra(t *testing.T) {
	cases := map[string]Kernel{
		"ncclAllReduceRingLLKernel_sum_f32(ncclColl)":                                        {"AllReduce", "RING", "LL", "ncclFloat32"},
		"ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)":                               {"AllReduce", "RING", "LL", "ncclFloat32"},
		"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": {"SendRecv", "RING", "SIMPLE", "ncclInt8"},
		"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)":         {"AllReduce", "RING", "LL", "ncclBfloat16"},
		"ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)":                  {"AllGather", "RING", "LL", ""},
		"ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)":      {"ReduceScatter", "RING", "LL", "ncclFloat32"},
		"ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)":                           {"SendRecv", "", "", ""},
		"ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)":                            {"Generic", "", "", ""},
	}
	for name, want := range cases {
		if got, ok := ParseKernel(name); !ok || got != want {
			t.Errorf("%s: %+v %v, want %+v", name, got, ok, want)
		}
	}
	for _, name := range []string{"void at::native::reduce_kernel<512>(...)", "ncclKernel_Bogus_RING", "nccl"} {
		if _, ok := ParseKernel(name); ok {
			t.Errorf("%s parsed as an NCCL kernel", name)
		}
	}
}

func TestNames(t *testing.T) {
	for c10d, want := range map[string]string{"allreduce": "AllReduce", "_allgather_base": "AllGather",
		"allgather_into_tensor_coalesced": "AllGather", "reduce_scatter_tensor_coalesced": "ReduceScatter",
		"_reduce_scatter_base": "ReduceScatter", "all_to_all": "AlltoAll", "broadcast": "Broadcast",
		"reduce": "Reduce", "send": "Send", "recv": "Recv", "barrier": "AllReduce"} {
		if got, ok := FromC10d(c10d); !ok || got != want {
			t.Errorf("FromC10d(%s) = %s %v", c10d, got, ok)
		}
	}
	if _, ok := FromC10d("wait"); ok {
		t.Error("wait launches no kernel")
	}
	for name, want := range map[string]string{"Float": "ncclFloat32", "BFloat16": "ncclBfloat16", "ncclHalf": "ncclFloat16", "Long": "ncclInt64"} {
		if got, _ := Datatype(name); got != want {
			t.Errorf("Datatype(%s) = %s", name, got)
		}
	}
	if !KernelRuns("SendRecv", "Send") || !KernelRuns("Generic", "AllReduce") || KernelRuns("AllReduce", "AllGather") {
		t.Error("KernelRuns")
	}
}

// nccl-tests: busbw = algbw × 2(n−1)/n for AllReduce, (n−1)/n for AllGather/ReduceScatter/AlltoAll.
func TestBandwidth(t *testing.T) {
	const size = 1 << 30
	alg, bus := Bandwidth("AllReduce", size, 1e9, 8) // 1 GiB in 1 s
	if math.Abs(alg-1.073741824) > 1e-9 || math.Abs(bus-alg*14/8) > 1e-9 {
		t.Errorf("AllReduce: %v %v", alg, bus)
	}
	if _, bus := Bandwidth("AllGather", size, 1e9, 4); math.Abs(bus-1.073741824*3/4) > 1e-9 {
		t.Errorf("AllGather: %v", bus)
	}
	if _, bus := Bandwidth("Broadcast", size, 1e9, 4); math.Abs(bus-1.073741824) > 1e-9 {
		t.Errorf("Broadcast: %v", bus)
	}
	if Size("AllGather", 1024, "ncclFloat32", 4) != 16384 || Size("AllReduce", 1024, "ncclBfloat16", 4) != 2048 {
		t.Error("Size")
	}
}
