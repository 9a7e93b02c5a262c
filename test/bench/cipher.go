package main

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"time"
)

// cipherChunk is what one call of cpuAES encrypts: a few 4 KiB blocks,
// as fscrypt encrypts a file's blocks one by one.
const cipherChunk = 16 << 10

// cpuAES returns the MB/s Go's AES-256-CTR encrypts at over total bytes:
// Go uses the CPU's AES instructions (AES-NI), which the kernel here has
// no driver for (no aesni in /proc/crypto), so this is what the CPU could
// do, for scale, next to what fscrypt does with the kernel's C AES. The
// kernel's own cipher speed cannot be measured from user space here: it
// has no AF_ALG (CONFIG_CRYPTO_USER_API_SKCIPHER is not set).
func cpuAES(total int) string {
	block, err := aes.NewCipher(make([]byte, 32))
	if err != nil {
		return err.Error()
	}
	s := cipher.NewCTR(block, make([]byte, aes.BlockSize))
	buf := make([]byte, cipherChunk)
	start := time.Now()
	for done := 0; done < total; done += cipherChunk {
		s.XORKeyStream(buf, buf)
	}
	return fmt.Sprintf("Go AES-256-CTR with AES-NI, one core: %.0f MB/s", float64(total)/1e6/time.Since(start).Seconds())
}
