package appexec

import "unsafe"

func uintptrOf(p *[4]uint64) uintptr { return uintptr(unsafe.Pointer(p)) }
