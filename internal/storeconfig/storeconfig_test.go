package storeconfig_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/storeconfig"
)

func TestFromSecret(t *testing.T) {
	const (
		url      = "rediss://redis.example.com:6380/0"
		password = "s3cret-pw"
	)
	full := map[string][]byte{
		"url": []byte(" " + url + "\n"), "username": []byte("manager"), "password": []byte(password),
		"ca.crt": []byte("CA"), "tls.crt": []byte("CERT"), "tls.key": []byte("KEY"),
	}
	with := func(key, value string) map[string][]byte {
		data := map[string][]byte{}
		for k, v := range full {
			data[k] = v
		}
		data[key] = []byte(value)
		return data
	}
	tests := []struct {
		name string
		data map[string][]byte
		want lockclient.Config
		err  string // "" means valid
	}{
		{name: "every key is read, the URL without surrounding whitespace", data: full,
			want: lockclient.Config{URL: url, Username: "manager", Password: password,
				CACert: []byte("CA"), ClientCert: []byte("CERT"), ClientKey: []byte("KEY")}},
		{name: "only a URL", data: map[string][]byte{"url": []byte("redis://127.0.0.1:6379")},
			want: lockclient.Config{URL: "redis://127.0.0.1:6379"}},
		{name: "insecureSkipVerify true turns verification off", data: with("insecureSkipVerify", "true\n"),
			want: lockclient.Config{URL: url, Username: "manager", Password: password,
				CACert: []byte("CA"), ClientCert: []byte("CERT"), ClientKey: []byte("KEY"), InsecureSkipVerify: true}},
		{name: "insecureSkipVerify false keeps it on", data: with("insecureSkipVerify", "false"),
			want: lockclient.Config{URL: url, Username: "manager", Password: password,
				CACert: []byte("CA"), ClientCert: []byte("CERT"), ClientKey: []byte("KEY")}},
		{name: "any other insecureSkipVerify is an error that does not quote it", data: with("insecureSkipVerify", password),
			err: `--redis-secret ns/store: insecureSkipVerify must be "true" or "false"`},
		{name: "yes is not true", data: with("insecureSkipVerify", "yes"),
			err: `--redis-secret ns/store: insecureSkipVerify must be "true" or "false"`},
		{name: "no url", data: map[string][]byte{"password": []byte(password)}, err: `--redis-secret ns/store has no key "url"`},
		{name: "a blank url", data: with("url", " \n"), err: `--redis-secret ns/store has no key "url"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := storeconfig.FromSecret("--redis-secret ns/store", tt.data)
			if tt.err != "" {
				g.Expect(err).To(MatchError(tt.err))
				g.Expect(err.Error()).NotTo(Or(ContainSubstring(password), ContainSubstring("redis.example.com")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}
