// Package cheader makes the C header of the stage1's hand-over
// (waiter/handover.h) from the constants of handover.go: the C programs
// then use the very numbers and names the Go processes do.
package cheader

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"strconv"
	"strings"
	"unicode"
)

// Generate returns the header for the Go file at path: a #define
// POD1_<NAME> for each exported constant, NAME its Go name in upper snake
// case, in the file's order, a blank line between declarations.
func Generate(path string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	// The constants alone, type-checked without the rest of the file:
	// their values are all the header needs, and they depend on
	// nothing imported.
	consts := &ast.File{Name: f.Name}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			consts.Decls = append(consts.Decls, g)
		}
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	if _, err := (&types.Config{}).Check(f.Name.Name, fset, []*ast.File{consts}, info); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "/* Generated from stage1-init/handover/handover.go by go generate\n")
	fmt.Fprintf(&b, " * (stage1-init/handover/mkheader): do not edit. What each means is\n")
	fmt.Fprintf(&b, " * said there. */\n#ifndef POD1_HANDOVER_H\n#define POD1_HANDOVER_H\n")
	for _, d := range consts.Decls {
		b.WriteByte('\n')
		for _, spec := range d.(*ast.GenDecl).Specs {
			for _, id := range spec.(*ast.ValueSpec).Names {
				if !id.IsExported() {
					continue
				}
				c := info.Defs[id].(*types.Const)
				v, err := cValue(c)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", path, id.Name, err)
				}
				fmt.Fprintf(&b, "#define POD1_%s %s\n", snake(id.Name), v)
			}
		}
	}
	b.WriteString("\n#endif\n")
	return b.Bytes(), nil
}

// cValue is c's value as a C literal: an integer, a character or a string
// of printable ASCII and newlines, which C spells as Go does.
func cValue(c *types.Const) (string, error) {
	v := c.Val()
	switch {
	case v.Kind() == constant.Int && c.Type() == types.Typ[types.UntypedRune]:
		r, ok := constant.Int64Val(v)
		if !ok || !cSafe(string(rune(r))) {
			return "", fmt.Errorf("rune %v has no plain C spelling", v)
		}
		return strconv.QuoteRune(rune(r)), nil
	case v.Kind() == constant.Int:
		n, ok := constant.Int64Val(v)
		if !ok {
			return "", fmt.Errorf("%v does not fit a C integer", v)
		}
		return strconv.FormatInt(n, 10), nil
	case v.Kind() == constant.String:
		s := constant.StringVal(v)
		if !cSafe(s) {
			return "", fmt.Errorf("%q has no plain C spelling", s)
		}
		return strconv.Quote(s), nil
	}
	return "", fmt.Errorf("a %v constant has no C form here", v.Kind())
}

func cSafe(s string) bool {
	for _, r := range s {
		if r != '\n' && (r > unicode.MaxASCII || !unicode.IsPrint(r)) {
			return false
		}
	}
	return true
}

// snake spells a Go name in upper snake case: ConfigFd CONFIG_FD,
// CRIDirFd CRI_DIR_FD, KeeperPID1Fd KEEPER_PID1_FD.
func snake(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		if i > 0 && unicode.IsUpper(r) {
			prev := rs[i-1]
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || unicode.IsUpper(prev) && i+1 < len(rs) && unicode.IsLower(rs[i+1]) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
