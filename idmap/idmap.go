// Package idmap owns a pod's user-namespace id mapping (rkt's
// --private-users=BASE:COUNT): ids 0 to COUNT-1 inside are the host's BASE
// onwards, for uids and gids alike. The stage1 maps its apps with it, and
// the host tools shift the owners of the trees they copy into a pod by it,
// as rkt's stage0 does. It depends on nothing, so both sides can use it.
package idmap

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Range is one contiguous mapping.
type Range struct {
	HostID uint32 `json:"hostID"`
	Size   uint32 `json:"size"`
}

// Parse reads BASE:COUNT (stage0 passes what it wrote to
// private-users-prepared, e.g. 1010499584:65536).
func Parse(v string) (*Range, error) {
	b, c, ok := strings.Cut(v, ":")
	if !ok {
		return nil, errors.New("want BASE:COUNT")
	}
	base, err1 := strconv.ParseUint(b, 10, 32)
	count, err2 := strconv.ParseUint(c, 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return nil, errors.New("want BASE:COUNT, two decimal numbers")
	case base == 0:
		// Mapping the apps' root to the host's is no user namespace.
		return nil, errors.New("BASE 0 would make the apps' root the host's root")
	case count == 0:
		return nil, errors.New("COUNT must be at least 1")
	case base+count > 1<<32-1:
		// (uid_t)-1 is not a uid.
		return nil, fmt.Errorf("the range ends at %d, past the last uid %d", base+count-1, uint64(1<<32-2))
	}
	return &Range{HostID: uint32(base), Size: uint32(count)}, nil
}

// String is the BASE:COUNT form.
func (r *Range) String() string { return fmt.Sprintf("%d:%d", r.HostID, r.Size) }

// Contains reports whether id is mapped (is below Size).
func (r *Range) Contains(id int) bool { return id >= 0 && uint64(id) < uint64(r.Size) }

// ToHost is the host's id for the owner id inside, refused when the
// range does not cover it.
func (r *Range) ToHost(id int) (int, error) {
	if !r.Contains(id) {
		return 0, fmt.Errorf("owner id %d is outside the pod's user namespace (0-%d, --private-users)", id, r.Size-1)
	}
	return id + int(r.HostID), nil
}

// FromHost is the id inside for a host id of the range, refused when the
// range does not cover it.
func (r *Range) FromHost(id int) (int, error) {
	if id < int(r.HostID) || uint64(id) >= uint64(r.HostID)+uint64(r.Size) {
		return 0, fmt.Errorf("host id %d is outside the pod's user namespace (host ids %d-%d, --private-users)", id, r.HostID, uint64(r.HostID)+uint64(r.Size)-1)
	}
	return id - int(r.HostID), nil
}
