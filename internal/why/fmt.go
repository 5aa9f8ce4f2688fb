package why

import "github.com/ncclprof/ncclprof/internal/words"

func fmtNs(ns int64) string { return words.Ns(ns) }
