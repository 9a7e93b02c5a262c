package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/filevol/filevol/internal/keywrap"
)

// cryptWorkload is one fio job of the encryption comparison. fscrypt on a
// kernel without inline encryption (CONFIG_BLK_INLINE_ENCRYPTION unset
// here) cannot do direct I/O on an encrypted file: ext4 quietly serves
// O_DIRECT through the page cache instead, so the direct-I/O workloads of
// the data path would compare a cached encrypted file with an uncached
// plain one. Every job here is buffered on both volumes alike, with the
// cache dropped before it (fio's invalidate) and the writes flushed
// (fsync), so that each byte is encrypted or decrypted once per job.
type cryptWorkload struct {
	name string
	args []string
	seq  bool // compared by bandwidth; random ones by IOPS
}

var cryptWorkloads = []cryptWorkload{
	// One pass, cold cache: every block read is decrypted once.
	{"1M seq read, buffered, cold", []string{"--rw=read", "--bs=1m", "--ioengine=psync"}, true},
	// One pass, then fsync: every block written is encrypted at writeback.
	{"1M seq write, buffered, fsync at end", []string{"--rw=write", "--bs=1m", "--ioengine=psync", "--end_fsync=1"}, true},
	// Time-based: the cache fills as it runs, on both alike.
	{"4k randread QD1, buffered", []string{"--rw=randread", "--bs=4k", "--ioengine=psync", "--time_based"}, false},
	// Each write made durable: a database's commit path.
	{"4k randwrite QD1, fdatasync each", []string{"--rw=randwrite", "--bs=4k", "--ioengine=psync", "--fdatasync=1", "--time_based"}, false},
}

// cryptJob runs w on file (its first size bytes) for at most runtime.
func cryptJob(ctx context.Context, file string, size int64, w cryptWorkload, runtime time.Duration) (fioResult, error) {
	args := append([]string{"--name=bench", "--filename=" + file, "--direct=0", "--invalidate=1",
		"--size=" + strconv.FormatInt(size, 10), "--runtime=" + strconv.Itoa(int(runtime.Seconds())) + "s",
		"--randrepeat=1", "--norandommap", "--output-format=json"}, w.args...)
	out, err := runFio(ctx, args)
	if err != nil {
		return fioResult{}, err
	}
	return parseFio(out, strings.Contains(strings.Join(w.args, " "), "write"))
}

// dataPathCrypt compares an encrypted ext4 volume (encryption: fscrypt)
// with a plain ext4 volume of the same size in the same pool: the same
// fio jobs, alternating A B A B (the first of each pair rotated every
// round), each round's figure a ratio of the encrypted volume's to the
// plain one's, reported as the median and spread of those ratios.
func (b *bench) dataPathCrypt(ctx context.Context) error {
	if b.cfg.fioRounds == 0 {
		return nil
	}
	size := b.cfg.fioSize
	material := make([]byte, 32)
	if _, err := rand.Read(material); err != nil {
		return err
	}
	secrets := map[string]string{keywrap.SecretKey: base64.StdEncoding.EncodeToString(material)}
	var targets []ioTarget
	defer func() { b.teardownIOTargets(targets) }()
	for _, v := range []struct {
		name            string
		params, secrets map[string]string
	}{{"plain ext4", nil, nil}, {"encrypted ext4", map[string]string{"encryption": "fscrypt"}, secrets}} {
		t, err := b.publishIOTargetOf(ctx, v.name, "ext4", size, v.params, v.secrets)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	for _, t := range targets {
		if err := fioFill(ctx, t.file, size); err != nil {
			return fmt.Errorf("fill %s: %w", t.name, err)
		}
		// The encrypted volume's fill went through the page cache: written
		// back now, not during the first job (a first cold read measured
		// 0 MiB/s while 256 MiB were encrypted and written behind it).
		if err := syncFile(t.file); err != nil {
			return fmt.Errorf("sync %s: %w", t.name, err)
		}
	}
	b.rep.detail("Encryption: the kernel's ciphers fscrypt used", "%s", cryptoDrivers())
	b.rep.detail("Encryption: what the CPU's AES instructions do (no kernel driver uses them here)", "%s", cpuAES(256<<20))
	res := make([][2][]fioResult, len(cryptWorkloads)) // [workload][plain, encrypted][round]
	start := time.Now()
	for round := range b.cfg.fioRounds {
		for w, wl := range cryptWorkloads {
			for k := range 2 {
				ti := (k + round + w) % 2
				r, err := cryptJob(ctx, targets[ti].file, size, wl, b.cfg.fioRuntime)
				if err != nil {
					return fmt.Errorf("%s on %s: %w", wl.name, targets[ti].name, err)
				}
				res[w][ti] = append(res[w][ti], r)
			}
		}
	}
	b.rep.detail("Encryption A/B run", "%d rounds × %d workloads × 2 volumes (A B A B, order rotated), at most %s each, %d MiB per volume, in %s; load average after: %s",
		b.cfg.fioRounds, len(cryptWorkloads), b.cfg.fioRuntime, size>>20, time.Since(start).Round(time.Second), loadAvg())
	for w, wl := range cryptWorkloads {
		plain, enc := res[w][0], res[w][1]
		for _, m := range []struct {
			unit  string
			scale float64
			f     func(fioResult) float64
		}{{"MiB/s", 1.0 / 1024, func(r fioResult) float64 { return r.bwKiB }}, {"IOPS", 1, func(r fioResult) float64 { return r.iops }}} {
			ratios := make([]float64, len(plain))
			for i := range plain {
				ratios[i] = m.f(enc[i]) / m.f(plain[i])
			}
			med, lo, hi := spread(ratios)
			if (m.unit == "MiB/s") == wl.seq {
				b.rep.info("E", fmt.Sprintf("%s: encrypted vs plain ext4, %s", wl.name, m.unit), fmt.Sprintf("%.1f %% (%.1f–%.1f)", 100*med, 100*lo, 100*hi))
			}
			b.rep.detail(fmt.Sprintf("Encryption A/B, %s, %s", wl.name, m.unit), "plain %s, encrypted %s; ratio %.1f %% (%.1f–%.1f); per round: plain %s, encrypted %s",
				fmtMedian(plain, func(r fioResult) float64 { return m.f(r) * m.scale }),
				fmtMedian(enc, func(r fioResult) float64 { return m.f(r) * m.scale }), 100*med, 100*lo, 100*hi,
				fmtEach(plain, m.f, m.scale), fmtEach(enc, m.f, m.scale))
		}
	}
	b.rep.note("Encryption A/B: buffered I/O on both volumes (fscrypt without inline encryption serves O_DIRECT through the page cache); the cipher drivers are in the details")
	return nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func fmtEach(rs []fioResult, f func(fioResult) float64, scale float64) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%.0f", f(r)*scale))
	}
	return strings.Join(parts, ", ")
}

// cryptoDrivers names the kernel's implementations of the ciphers of
// filevol's fscrypt policy and of AES itself, with their priorities, as
// /proc/crypto lists them once used: the kernel picks the highest
// priority, and on a kernel without the aesni driver every one is C code.
func cryptoDrivers() string {
	f, err := os.Open("/proc/crypto")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var out []string
	var name, driver string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		k, v, ok := strings.Cut(sc.Text(), ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
		case k == "name":
			name = v
		case k == "driver":
			driver = v
		case k == "priority" && (name == "xts(aes)" || name == "cts(cbc(aes))" || name == "aes"):
			out = append(out, fmt.Sprintf("%s → %s (priority %s)", name, driver, v))
		}
	}
	if len(out) == 0 {
		return "neither xts(aes) nor cts(cbc(aes)) nor aes in /proc/crypto"
	}
	return strings.Join(out, "; ")
}
