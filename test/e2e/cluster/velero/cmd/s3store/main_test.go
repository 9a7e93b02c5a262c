package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The test binary doubles as the store: a child started with this variable
// runs main, so the store is a real process that gets a real SIGTERM.
const asStore = "FILEVOL_S3STORE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asStore) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// workDir is a directory named after this process, so that the next run
// removes what a killed run left (the directories of processes that are gone)
// and never another running test's.
func workDir(t *testing.T) string {
	t.Helper()
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), "filevol-s3store-test-*"))
	for _, d := range old {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "filevol-s3store-test-"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
	d := filepath.Join(os.TempDir(), fmt.Sprintf("filevol-s3store-test-%d", os.Getpid()))
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type store struct {
	cmd  *exec.Cmd
	addr string
}

// startStore runs the store on 127.0.0.1 with a port of its choosing and
// waits for the address it prints.
func startStore(t *testing.T, db string) *store {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-listen", "127.0.0.1:0", "-db", db, "-bucket", "velero-e2e")
	cmd.Env = append(os.Environ(), asStore+"=1")
	cmd.Stderr = os.Stderr
	// A killed test takes its store with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &store{cmd: cmd}
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("store printed no address: %v", err)
	}
	var bucket string
	if _, err := fmt.Sscanf(line, "listening on %s bucket %s", &s.addr, &bucket); err != nil || bucket != "velero-e2e" {
		t.Fatalf("store said %q (%v)", line, err)
	}
	return s
}

// stop sends SIGTERM and requires a clean exit.
func (s *store) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("store exited after SIGTERM with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("store still running 30 s after SIGTERM")
	}
}

func client(addr string) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String("http://" + addr),
		Region:       "minio", // what velero's docs give for a non-AWS store; any name works
		UsePathStyle: true,    // s3ForcePathStyle=true in the backup location
		Credentials:  credentials.NewStaticCredentialsProvider("velero", "secret", ""),
	})
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func get(ctx context.Context, t *testing.T, c *s3.Client, key string) []byte {
	t.Helper()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("velero-e2e"), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPutListGetAcrossRestart: objects put through the AWS SDK v2 (what
// velero-plugin-for-aws speaks), one of them in a multipart upload as the
// plugin's uploader makes for large backups, are listed and read back
// byte for byte, and again after the store was stopped with SIGTERM and
// started on the same file.
func TestPutListGetAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := filepath.Join(workDir(t), "store.db")
	s := startStore(t, db)
	c := client(s.addr)

	objects := map[string][]byte{
		"backups/b1/velero-backup.json": randomBytes(t, 4096),
		"kopia/ns1/p0123":               randomBytes(t, 1<<20),
		"kopia/ns1/multipart":           randomBytes(t, 12<<20),
	}
	for k, v := range objects {
		if k == "kopia/ns1/multipart" {
			up := manager.NewUploader(c, func(u *manager.Uploader) { u.PartSize = 5 << 20 })
			if _, err := up.Upload(ctx, &s3.PutObjectInput{Bucket: aws.String("velero-e2e"), Key: aws.String(k), Body: bytes.NewReader(v)}); err != nil {
				t.Fatalf("multipart upload %s: %v", k, err)
			}
			continue
		}
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("velero-e2e"), Key: aws.String(k), Body: bytes.NewReader(v)}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}

	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("velero-e2e"), Prefix: aws.String("kopia/")})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range list.Contents {
		keys = append(keys, aws.ToString(o.Key))
		if want := int64(len(objects[aws.ToString(o.Key)])); aws.ToInt64(o.Size) != want {
			t.Errorf("%s listed with %d bytes, put %d", aws.ToString(o.Key), aws.ToInt64(o.Size), want)
		}
	}
	sort.Strings(keys)
	if got, want := strings.Join(keys, " "), "kopia/ns1/multipart kopia/ns1/p0123"; got != want {
		t.Fatalf("listed %q under kopia/, want %q", got, want)
	}
	for k, v := range objects {
		if !bytes.Equal(get(ctx, t, c, k), v) {
			t.Fatalf("%s read back differs from what was put", k)
		}
	}

	s.stop(t)
	s = startStore(t, db)
	c = client(s.addr)
	for k, v := range objects {
		if !bytes.Equal(get(ctx, t, c, k), v) {
			t.Fatalf("%s after a restart differs from what was put", k)
		}
	}
	s.stop(t)
}

func TestRefusesBadFlags(t *testing.T) {
	db := filepath.Join(workDir(t), "never.db")
	for _, args := range [][]string{
		{"-listen", "0.0.0.0:9000", "-db", db},
		{"-listen", "[::]:9000", "-db", db},
		{"-listen", ":9000", "-db", db},
		{"-listen", "localhost:9000", "-db", db},
		{"-listen", "127.0.0.1:9000"},
		{"-listen", "127.0.0.1:9000", "-db", db, "-bucket", "Bad_Name"},
	} {
		err := run(context.Background(), args, io.Discard)
		if err == nil {
			t.Errorf("%q accepted", args)
			continue
		}
		t.Logf("%q: %v", args, err)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused start left %s (%v)", db, err)
	}
}
