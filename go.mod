module github.com/ncclprof/ncclprof

go 1.25.0
