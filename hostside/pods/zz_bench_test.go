package pods

import "testing"

func BenchmarkListSummaryTmp(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l, errs := List("/tmp/list4/d", IncludeMost, Summary)
		if len(l) != 1000 || len(errs) != 0 {
			b.Fatal(len(l), errs)
		}
	}
}
