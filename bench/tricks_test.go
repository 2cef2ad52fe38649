package main

import (
	"math"
	"testing"
)

func TestSignTail(t *testing.T) {
	for _, c := range []struct {
		k, n int
		want float64
	}{{0, 10, 1}, {10, 10, 1.0 / 1024}, {9, 10, 11.0 / 1024}, {21, 30, 0.02139}} {
		if got := signTail(c.k, c.n); math.Abs(got-c.want) > 1e-4 {
			t.Errorf("signTail(%d, %d) = %g, want %g", c.k, c.n, got, c.want)
		}
	}
}

func TestPairedRatios(t *testing.T) {
	a := &metric{vals: []float64{2, 3, 4, 1}}
	b := &metric{vals: []float64{1, 1, 2, 2, 9}}
	med, q1, q3, higher, n := pairedRatios(a, b)
	// 2, 3, 2, 0.5 sorted: 0.5 2 2 3.
	if n != 4 || higher != 3 || med != 2 || q1 != 1.625 || q3 != 2.25 {
		t.Fatalf("med %g q1 %g q3 %g higher %d n %d", med, q1, q3, higher, n)
	}
}
