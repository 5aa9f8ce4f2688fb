package telemetry

import (
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Strings that reach metrics from outside the plugin (NCCL's communicator names and function,
// algorithm and protocol strings, the step labels a training script sets, the environment
// variables in the resource) are repaired where they enter: protobuf refuses to encode a string
// that is not valid UTF-8, so one such label would fail every export, OTLP and file alike, and
// every other series with it. Invalid bytes become U+FFFD; each repaired string is counted
// (ncclprof.plugin.conditions{ncclprof.kind="invalid_utf8"}) and warned about once.

// KindInvalidUTF8 is the ncclprof.plugin.conditions kind that counts repaired strings.
const KindInvalidUTF8 = "invalid_utf8"

// repairs makes strings valid UTF-8 and counts those it had to change. Safe for concurrent use.
type repairs struct{ n atomic.Uint64 }

func (r *repairs) str(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	r.n.Add(1)
	return strings.ToValidUTF8(s, "\uFFFD")
}

// resource returns res with every string attribute valid UTF-8.
func (r *repairs) resource(res *resource.Resource) *resource.Resource {
	kvs := res.Attributes()
	changed := false
	for i, kv := range kvs {
		if kv.Value.Type() == attribute.STRING {
			if s := kv.Value.AsString(); !utf8.ValidString(s) {
				kvs[i] = attribute.String(string(kv.Key), r.str(s))
				changed = true
			}
		}
	}
	if !changed {
		return res
	}
	return resource.NewWithAttributes(res.SchemaURL(), kvs...)
}
