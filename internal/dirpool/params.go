package dirpool

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"github.com/filevol/filevol/internal/volume"
)

// StorageClass parameters of a directory volume. The names, and the
// defaults where the meaning is the same, are the AWS EFS CSI driver's
// (docs/directory-volumes.md: the side-by-side).
const (
	// ParamProvisioningMode selects a directory volume with the value
	// ProvisioningModeDirectory (EFS: provisioningMode: efs-ap).
	ParamProvisioningMode     = volume.ParamProvisioningMode
	ProvisioningModeDirectory = volume.ProvisioningModeDirectory

	ParamBasePath       = "basePath"
	ParamSubPathPattern = "subPathPattern"
	ParamEnsureUnique   = "ensureUniqueDirectory"
	ParamUID            = "uid"
	ParamGID            = "gid"
	ParamGIDRangeStart  = "gidRangeStart"
	ParamGIDRangeEnd    = "gidRangeEnd"
	ParamDirectoryPerms = "directoryPerms"
	// ParamDeleteDirectory "false" keeps a deleted volume's directory and
	// data (retain.go); default "true" (EFS: deleteAccessPointRootDir,
	// default false).
	ParamDeleteDirectory = "deleteDirectory"
	// ParamAllowUnenforcedSize "true" lets a pool without a usable quota
	// (plain.go) create volumes whose size is not enforced; default
	// "false": such creates are refused. filevol's own; EFS has no quota.
	ParamAllowUnenforcedSize = "allowUnenforcedSize"

	// What external-provisioner passes with --extra-create-metadata.
	ParamPVCNamespace = volume.ParamPVCNamespace
	ParamPVCName      = volume.ParamPVCName
	ParamPVName       = volume.ParamPVName
)

// Defaults.
const (
	DefaultSubPathPattern = "${.PV.name}"
	DefaultGIDRangeStart  = 50000   // EFS's default
	DefaultGIDRangeEnd    = 7000000 // EFS's default
	DefaultDirectoryPerms = 0o770
	// maxPathLen bounds basePath plus the rendered pattern; each
	// component is at most maxComponentLen (NAME_MAX).
	maxPathLen      = 1024
	maxComponentLen = 255
)

// Params are a directory volume's validated parameters.
type Params struct {
	// BasePath is where, under the pool, the volumes' directories are
	// made ("": the pool's root).
	BasePath string
	// SubPathPattern names the directory under BasePath.
	SubPathPattern string
	// EnsureUnique appends "-<16 hex digits of the volume ID>" to the
	// directory's name.
	EnsureUnique bool
	// UID and GID own the directory; GID is allocated from the range
	// when HasGID is false, and UID is then the allocated GID (as EFS).
	UID, GID       uint32
	HasUID, HasGID bool
	// GIDRangeStart..GIDRangeEnd (inclusive) is where gids are allocated.
	GIDRangeStart, GIDRangeEnd uint32
	// Perms is the directory's mode (permission bits only).
	Perms uint32
	// Retain: a delete keeps the directory (deleteDirectory: "false").
	Retain bool
	// AllowUnenforced: a pool without quota may create the volume.
	AllowUnenforced bool
	// Metadata of the claim, from external-provisioner.
	PVCNamespace, PVCName, PVName string
}

// Parameters validates the parameters of a directory volume. Every
// parameter is applied or refused, never ignored: an unknown one is an
// error wrapping ErrInvalidParameter.
func Parameters(params map[string]string) (Params, error) {
	p := Params{SubPathPattern: DefaultSubPathPattern, EnsureUnique: true,
		GIDRangeStart: DefaultGIDRangeStart, GIDRangeEnd: DefaultGIDRangeEnd, Perms: DefaultDirectoryPerms}
	var err error
	for k, v := range params {
		switch k {
		case ParamBasePath:
			p.BasePath = strings.Trim(v, "/")
		case ParamSubPathPattern:
			p.SubPathPattern = v
		case ParamEnsureUnique:
			p.EnsureUnique, err = strconv.ParseBool(v)
		case ParamUID:
			p.UID, err = parseID(v)
			p.HasUID = true
		case ParamGID:
			p.GID, err = parseID(v)
			p.HasGID = true
		case ParamGIDRangeStart:
			p.GIDRangeStart, err = parseID(v)
		case ParamGIDRangeEnd:
			p.GIDRangeEnd, err = parseID(v)
		case ParamDirectoryPerms:
			var m uint64
			m, err = strconv.ParseUint(v, 8, 32)
			if err == nil && m > 0o7777 {
				err = fmt.Errorf("not a mode of at most 7777")
			}
			p.Perms = uint32(m)
		case ParamDeleteDirectory:
			var del bool
			del, err = strconv.ParseBool(v)
			p.Retain = !del
		case ParamAllowUnenforcedSize:
			p.AllowUnenforced, err = strconv.ParseBool(v)
		case ParamPVCNamespace:
			p.PVCNamespace = v
		case ParamPVCName:
			p.PVCName = v
		case ParamPVName:
			p.PVName = v
		case ParamProvisioningMode:
			if v != ProvisioningModeDirectory {
				err = fmt.Errorf("a directory pool makes %q volumes only", ProvisioningModeDirectory)
			}
		default:
			return p, fmt.Errorf("%w: unknown parameter %q for a directory volume (accepted: %s)", ErrInvalidParameter, k,
				strings.Join([]string{ParamBasePath, ParamSubPathPattern, ParamEnsureUnique, ParamUID, ParamGID,
					ParamGIDRangeStart, ParamGIDRangeEnd, ParamDirectoryPerms, ParamDeleteDirectory, ParamAllowUnenforcedSize}, ", "))
		}
		if err != nil {
			return p, fmt.Errorf("%w: parameter %s=%q: %v", ErrInvalidParameter, k, v, err)
		}
	}
	if p.GIDRangeStart == 0 || p.GIDRangeStart > p.GIDRangeEnd {
		return p, fmt.Errorf("%w: gid range %d-%d: %s must be at least 1 and at most %s", ErrInvalidParameter,
			p.GIDRangeStart, p.GIDRangeEnd, ParamGIDRangeStart, ParamGIDRangeEnd)
	}
	if p.BasePath != "" {
		if err := checkPath(ParamBasePath, p.BasePath); err != nil {
			return p, err
		}
	}
	// The pattern alone (placeholders filled with a harmless value) must
	// be valid, so that a class is refused at its first create. The
	// claim's metadata is not part of it: GetCapacity and
	// ValidateVolumeCapabilities never carry any, and Path refuses a
	// create that lacks what the pattern uses, naming the flag.
	probe := p
	probe.PVCNamespace, probe.PVCName = cmp.Or(p.PVCNamespace, "x"), cmp.Or(p.PVCName, "x")
	if _, err := probe.render("x", "probe"); err != nil {
		return p, err
	}
	return p, nil
}

// parseID reads a uid or gid: a decimal number below 2^31 (negative and
// the kernel's (uid_t)-1 are refused).
func parseID(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("not a decimal id below 2147483648")
	}
	return uint32(n), nil
}

// Path returns the directory of the volume called name with the ID id,
// relative to the pool's root: basePath/<subPathPattern>[-<unique>].
func (p Params) Path(name, id string) (string, error) {
	unique := ""
	if p.EnsureUnique {
		h := id[len(id)-32:]
		unique = "-" + h[:16]
	}
	return p.render(name, unique)
}

func (p Params) render(name, unique string) (string, error) {
	vals := map[string]string{
		"${.PVC.namespace}": p.PVCNamespace,
		"${.PVC.name}":      p.PVCName,
		"${.PV.name}":       p.PVName,
	}
	if vals["${.PV.name}"] == "" {
		vals["${.PV.name}"] = name // external-provisioner names the volume after the PV
	}
	var b strings.Builder
	rest := p.SubPathPattern
	for rest != "" {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		j := strings.Index(rest[i:], "}")
		if j < 0 {
			return "", fmt.Errorf("%w: %s %q has an unterminated ${", ErrInvalidParameter, ParamSubPathPattern, p.SubPathPattern)
		}
		ph := rest[i : i+j+1]
		v, ok := vals[ph]
		if !ok {
			return "", fmt.Errorf("%w: %s %q uses %s; known are ${.PVC.namespace}, ${.PVC.name} and ${.PV.name}",
				ErrInvalidParameter, ParamSubPathPattern, p.SubPathPattern, ph)
		}
		if v == "" {
			return "", fmt.Errorf("%w: %s %q uses %s, but the request has no %s: run external-provisioner with --extra-create-metadata",
				ErrInvalidParameter, ParamSubPathPattern, p.SubPathPattern, ph, metaParam(ph))
		}
		if err := checkValue(ph, v); err != nil {
			return "", err
		}
		b.WriteString(v)
		rest = rest[i+j+1:]
	}
	sub := strings.Trim(b.String(), "/")
	if sub == "" {
		return "", fmt.Errorf("%w: %s %q names no directory", ErrInvalidParameter, ParamSubPathPattern, p.SubPathPattern)
	}
	if err := checkPath(ParamSubPathPattern, sub+unique); err != nil {
		return "", err
	}
	full := sub + unique
	if p.BasePath != "" {
		full = p.BasePath + "/" + full
	}
	if len(full) > maxPathLen {
		return "", fmt.Errorf("%w: the volume's directory %q is longer than %d bytes", ErrInvalidPath, full, maxPathLen)
	}
	return full, nil
}

func metaParam(ph string) string {
	switch ph {
	case "${.PVC.namespace}":
		return ParamPVCNamespace
	case "${.PVC.name}":
		return ParamPVCName
	}
	return ParamPVName
}

// checkValue refuses a claim's name or namespace that could be more than
// one path component: Kubernetes names are DNS labels and subdomains.
func checkValue(ph, v string) error {
	if len(v) > 253 || v[0] == '.' || v[0] == '-' {
		return fmt.Errorf("%w: %s %q is not a Kubernetes name", ErrInvalidPath, ph, truncate(v))
	}
	for _, c := range []byte(v) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c >= 'A' && c <= 'Z' || c == '_') {
			return fmt.Errorf("%w: %s %q holds %q, which a Kubernetes name cannot", ErrInvalidPath, ph, truncate(v), c)
		}
	}
	return nil
}

// checkPath checks a relative path of plain components: no "", ".",
// "..", no component starting with "." (the pool's own .filevol is
// never reachable), none longer than NAME_MAX, only [A-Za-z0-9._-].
func checkPath(what, path string) error {
	if len(path) > maxPathLen {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalidPath, what, maxPathLen)
	}
	for _, c := range strings.Split(path, "/") {
		if c == "" || c[0] == '.' || len(c) > maxComponentLen {
			return fmt.Errorf("%w: %s %q has the component %q (empty, starting with '.', or longer than %d bytes)",
				ErrInvalidPath, what, truncate(path), truncate(c), maxComponentLen)
		}
		for _, b := range []byte(c) {
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '.' || b == '_') {
				return fmt.Errorf("%w: %s %q holds %q; only letters, digits, '.', '-', '_' and '/' are accepted",
					ErrInvalidPath, what, truncate(path), b)
			}
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
