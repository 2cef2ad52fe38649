package journalfile

import "testing"

func TestJenkinsVectors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"", 0xdeadbeefdeadbeef},
		{"Four score and seven years ago", 0x17770551ce7226e6},
	} {
		if got := jenkinsHash64([]byte(tc.in)); got != tc.want {
			t.Errorf("%q: %#x want %#x", tc.in, got, tc.want)
		}
	}
}
