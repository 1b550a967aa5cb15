package podguard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// writeSecretVolume lays out files the way the kubelet mounts a Secret: the
// data in a timestamped directory, "..data" pointing at it, and one symlink
// per key.
func writeSecretVolume(t *testing.T, data map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_01_02_03_04_05.000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range data {
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadStoreDirReadsAMountedSecret(t *testing.T) {
	g := NewWithT(t)
	dir := writeSecretVolume(t, map[string]string{"url": "redis://r:6379\n", "password": "pw", "ca.crt": "PEM"})
	data, err := ReadStoreDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(data).To(Equal(map[string][]byte{"url": []byte("redis://r:6379\n"), "password": []byte("pw"), "ca.crt": []byte("PEM")}))

	cfg, err := StoreConfig(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.URL).To(Equal("redis://r:6379"))
	g.Expect(cfg.Password).To(Equal("pw"))
	g.Expect(cfg.CACert).To(Equal([]byte("PEM")))
	g.Expect(cfg.InsecureSkipVerify).To(BeFalse())

	_, err = ReadStoreDir(filepath.Join(dir, "missing"))
	g.Expect(err).To(MatchError(ContainSubstring("read store directory")))
}

func TestStoreConfig(t *testing.T) {
	const hostile = `p@ss:/?#%w0rd"` // every character a URL parser may split at
	for name, tc := range map[string]struct {
		data    map[string]string
		wantErr string
		check   func(g Gomega, insecure bool)
	}{
		"no url": {data: map[string]string{"password": hostile}, wantErr: `no key "url"`},
		"insecureSkipVerify true": {data: map[string]string{"url": "rediss://r:6380", "insecureSkipVerify": "true"},
			check: func(g Gomega, insecure bool) { g.Expect(insecure).To(BeTrue()) }},
		"insecureSkipVerify false": {data: map[string]string{"url": "rediss://r:6380", "insecureSkipVerify": "false\n"},
			check: func(g Gomega, insecure bool) { g.Expect(insecure).To(BeFalse()) }},
		"insecureSkipVerify other": {data: map[string]string{"url": "rediss://r:6380", "insecureSkipVerify": "yes"}, wantErr: `must be "true" or "false"`},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			data := map[string][]byte{}
			for k, v := range tc.data {
				data[k] = []byte(v)
			}
			cfg, err := StoreConfig(data)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				g.Expect(err.Error()).NotTo(ContainSubstring("p@ss"))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			tc.check(g, cfg.InsecureSkipVerify)
		})
	}
}

func TestReadStoreDirRefusesAHugeFile(t *testing.T) {
	g := NewWithT(t)
	dir := writeSecretVolume(t, map[string]string{"url": strings.Repeat("x", maxStoreFile+1)})
	_, err := ReadStoreDir(dir)
	g.Expect(err).To(MatchError(ContainSubstring("larger than")))
}
