// Package storeconfig maps the data of a lock store Secret to a lockclient.Config:
// the same rules for the manager's --redis-secret, a GuardedJob's
// spec.lock.storeRef and the kubectl plugin reading either.
package storeconfig

import (
	"fmt"
	"strings"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// FromSecret returns the lock store connection that the data of a Secret
// describes: key url (required; surrounding whitespace is ignored), and optional
// username, password, ca.crt, tls.crt, tls.key and insecureSkipVerify ("true" or
// "false"; empty means false). Timeout, Tenant and Allow are left to the caller.
//
// source names the Secret in errors, such as "--redis-secret ns/name". Errors
// never hold the URL or the password.
func FromSecret(source string, data map[string][]byte) (lockclient.Config, error) {
	url := strings.TrimSpace(string(data["url"]))
	if url == "" {
		return lockclient.Config{}, fmt.Errorf("%s has no key \"url\"", source)
	}
	var insecure bool
	switch v := strings.TrimSpace(string(data["insecureSkipVerify"])); v {
	case "", "false":
	case "true":
		insecure = true
	default:
		// The value is not quoted: a password pasted under the wrong key must not
		// reach a message.
		return lockclient.Config{}, fmt.Errorf("%s: insecureSkipVerify must be \"true\" or \"false\"", source)
	}
	return lockclient.Config{
		URL: url, Username: string(data["username"]), Password: string(data["password"]),
		CACert: data["ca.crt"], ClientCert: data["tls.crt"], ClientKey: data["tls.key"],
		InsecureSkipVerify: insecure,
	}, nil
}
