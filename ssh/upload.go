package ssh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Upload copies the local file to remotePath on h atomically: the bytes go
// to a temporary file in the target directory, which is chmod'ed to mode,
// checked with a sha256sum computed on the server against the local
// sha256, and only then renamed over remotePath. On any failure the target
// is untouched and the temporary file removed.
func (p *Pool) Upload(ctx context.Context, h Host, localPath, remotePath string, mode fs.FileMode) error {
	f, err := os.Open(localPath)
	if err != nil {
		return fmt.Errorf("upload to %s: %w", h, err)
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return fmt.Errorf("upload %s to %s: %w", localPath, h, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("upload %s to %s: %w", localPath, h, err)
	}
	return p.upload(ctx, h, f, hex.EncodeToString(sum.Sum(nil)), remotePath, mode)
}

// UploadBytes is Upload for content held in memory.
func (p *Pool) UploadBytes(ctx context.Context, h Host, data []byte, remotePath string, mode fs.FileMode) error {
	sum := sha256.Sum256(data)
	return p.upload(ctx, h, bytes.NewReader(data), hex.EncodeToString(sum[:]), remotePath, mode)
}

func (p *Pool) upload(ctx context.Context, h Host, r io.Reader, want, remotePath string, mode fs.FileMode) error {
	if remotePath == "" || strings.HasSuffix(remotePath, "/") {
		return fmt.Errorf("upload to %s: bad remote path %q", h, remotePath)
	}
	dir, base := path.Split(remotePath)
	if dir == "" {
		dir = "."
	}
	// The script reads the file from stdin. sha256sum runs on the server;
	// the rename happens only when its sum matches ours, and the sum is
	// also printed so the caller checks it a second time. mv -T (GNU) renames
	// over the target and never into a directory of that name.
	script := strings.Join([]string{
		"set -e",
		"t=$(mktemp " + Quote(path.Join(dir, "."+base+".replan-XXXXXX")) + ")",
		`trap 'rm -f "$t"' EXIT`,
		`cat > "$t"`,
		fmt.Sprintf(`chmod %04o "$t"`, mode.Perm()),
		`s=$(sha256sum "$t")`,
		`s=${s%% *}`,
		`echo "$s"`,
		`[ "$s" = ` + Quote(want) + ` ] || { echo "sha256 mismatch: remote $s" >&2; exit 3; }`,
		`mv -fT "$t" ` + Quote(remotePath),
		"trap - EXIT",
	}, "\n")
	var out, errb bytes.Buffer
	err := p.Run(ctx, h, Cmd{Script: script, Stdin: r, Stdout: &out, Stderr: &errb})
	if err != nil {
		return fmt.Errorf("upload to %s:%s: %w: %s", h, remotePath, err, strings.TrimSpace(errb.String()))
	}
	if got := strings.TrimSpace(out.String()); got != want {
		return fmt.Errorf("upload to %s:%s: remote sha256 %q, local %s", h, remotePath, got, want)
	}
	return nil
}
