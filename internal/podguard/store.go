package podguard

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/storeconfig"
)

// The guard's store Secret, mounted as files into the guard container, has the
// keys of any store Secret (internal/storeconfig), so one Secret shape serves
// both; only the credentials differ (a read-only ACL user).

// maxStoreFile bounds one file of the store directory: a Secret holds at most
// 1 MiB in all.
const maxStoreFile = 1 << 20

// ReadStoreDir reads the files a Secret volume holds into a map, as the
// Secret's data. The volume's own bookkeeping entries (names starting with
// "..") and subdirectories are skipped.
func ReadStoreDir(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read store directory: %w", err)
	}
	data := map[string][]byte{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path) // follows the volume's symlinks
		if err != nil {
			return nil, fmt.Errorf("read store directory: %w", err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := readLimited(path)
		if err != nil {
			return nil, fmt.Errorf("read store directory: %s: %w", name, err)
		}
		data[name] = b
	}
	return data, nil
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxStoreFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxStoreFile {
		return nil, fmt.Errorf("larger than %d bytes", maxStoreFile)
	}
	return b, nil
}

// StoreConfig turns the guard's store Secret into a client configuration, by
// the rules of every store Secret. Its errors never quote a value: any of them
// may be a password.
func StoreConfig(data map[string][]byte) (lockclient.Config, error) {
	return storeconfig.FromSecret("the store Secret", data)
}
