// Command cp-plugin is the entrypoint of the harness's Velero plugin image.
// `velero install --plugins IMAGE` runs each plugin image as an init
// container of the server with the server's plugin directory (an emptyDir)
// mounted at /target, and no command of its own: the image copies its plugin
// binary there, and the server starts it from /plugins. The image has no shell
// and no cp, hence this program.
//
//	cp-plugin SRC DST
//
// DST is written beside itself and renamed into place, so the server never
// sees half a binary, and made executable (0755) whatever SRC's mode.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: cp-plugin SRC DST")
		os.Exit(2)
	}
	if err := copyPlugin(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "cp-plugin: %v\n", err)
		os.Exit(1)
	}
}

func copyPlugin(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		return err
	}
	if err = tmp.Chmod(0o755); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
