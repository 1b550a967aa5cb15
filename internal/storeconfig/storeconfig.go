// Package storeconfig maps the data of a lock store Secret to a lockclient.Config:
// the same rules for the manager's --redis-secret, a GuardedJob's
// spec.lock.storeRef, the pod guard's lock.podGuard.secretRef (mounted as files)
// and the kubectl plugin reading any of them.
package storeconfig

import (
	"fmt"
	"strings"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// The keys of a store Secret.
const (
	KeyURL                = "url"
	KeyUsername           = "username"
	KeyPassword           = "password"
	KeyCACert             = "ca.crt"
	KeyClientCert         = "tls.crt"
	KeyClientKey          = "tls.key"
	KeyInsecureSkipVerify = "insecureSkipVerify"
)

// FromSecret returns the lock store connection that the data of a Secret
// describes: key url (required; surrounding whitespace is ignored), and optional
// username, password, ca.crt, tls.crt, tls.key and insecureSkipVerify ("true" or
// "false"; empty means false). Timeout, Tenant and Allow are left to the caller.
//
// source names the Secret in errors, such as "--redis-secret ns/name". Errors
// never hold the URL or the password.
func FromSecret(source string, data map[string][]byte) (lockclient.Config, error) {
	url := strings.TrimSpace(string(data[KeyURL]))
	if url == "" {
		return lockclient.Config{}, fmt.Errorf("%s has no key %q", source, KeyURL)
	}
	var insecure bool
	switch v := strings.TrimSpace(string(data[KeyInsecureSkipVerify])); v {
	case "", "false":
	case "true":
		insecure = true
	default:
		// The value is not quoted: a password pasted under the wrong key must not
		// reach a message.
		return lockclient.Config{}, fmt.Errorf("%s: %s must be \"true\" or \"false\"", source, KeyInsecureSkipVerify)
	}
	return lockclient.Config{
		URL: url, Username: string(data[KeyUsername]), Password: string(data[KeyPassword]),
		CACert: data[KeyCACert], ClientCert: data[KeyClientCert], ClientKey: data[KeyClientKey],
		InsecureSkipVerify: insecure,
	}, nil
}
