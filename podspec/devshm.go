package podspec

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/appc/spec/schema/types"
)

// AnnShmSize (pod) bounds the pod's /dev/shm, which its apps share.
const AnnShmSize = "pod1/shm-size"

// shmSize reads the bound of the pod's /dev/shm: a positive byte count
// with an optional binary suffix (K, M, G, T), or 0 when the annotation is
// absent (tmpfs's default, half of the host's memory). A bound of 0 would
// mean none to tmpfs, so it is refused with the rest.
func shmSize(pod types.Annotations) (int64, error) {
	v, ok := pod.Get(AnnShmSize)
	if !ok {
		return 0, nil
	}
	s, mult := v, int64(1)
	if n := len(s); n > 0 {
		if i := strings.IndexByte("KMGT", s[n-1]&^0x20); i >= 0 {
			mult, s = int64(1)<<(10*(i+1)), s[:n-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult || s != strconv.FormatInt(n, 10) {
		return 0, fmt.Errorf("annotation %s: %q must be a positive byte count with an optional K, M, G or T suffix, e.g. 512M", AnnShmSize, v)
	}
	return n * mult, nil
}
