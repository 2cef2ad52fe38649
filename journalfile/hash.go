package journalfile

import "math/bits"

// jenkinsHash64 is the hash a journal file without the keyed-hash flag
// gives its data and field objects: Bob Jenkins' lookup3 hashlittle2 with
// both seeds 0, the primary result in the high half (systemd's
// jenkins_hash64). Only the byte-at-a-time reading of the key is written
// here; lookup3's word-at-a-time readings give the same values on a
// little-endian machine.
func jenkinsHash64(k []byte) uint64 {
	a := 0xdeadbeef + uint32(len(k))
	b, c := a, a
	for len(k) > 12 {
		a += le32(k[0:4])
		b += le32(k[4:8])
		c += le32(k[8:12])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	if len(k) == 0 {
		return uint64(c)<<32 | uint64(b)
	}
	// The tail: the missing bytes of the last 12 count as zeros.
	var tail [12]byte
	copy(tail[:], k)
	a += le32(tail[0:4])
	b += le32(tail[4:8])
	c += le32(tail[8:12])
	_, b, c = final(a, b, c)
	return uint64(c)<<32 | uint64(b)
}

func le32(p []byte) uint32 {
	return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
}

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}
