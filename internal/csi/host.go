package csi

import "github.com/filevol/filevol/internal/hostos"

// Host is everything the services ask of the kernel, in three seams: loop
// devices (Loops), the mount table (Mounts) and filesystem tools (FS). The
// real one is hostos.New; unit tests pass hostos/fake's, which keeps the
// state a real kernel would. What the kernel shows of one volume is read
// through package volview, never classified here.
type Host = hostos.Host
