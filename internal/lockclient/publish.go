package lockclient

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// publishScript keeps one value under a key shared by every manager of a
// store: it writes value when the key is absent, renews its ttl when the key
// holds the same value, and otherwise leaves it; it returns what the key holds.
var publishScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return v
`)

// Publish makes key hold value for ttl unless it holds another value, which it
// leaves as it is, and returns what key holds afterwards (one round trip).
// Managers sharing a store publish a setting they must agree on this way: the
// first one's value stands while any manager with the same value renews it,
// and a manager that reads another value knows they disagree. On a Redlock
// store it uses the first node, as Swap does.
func (c *Client) Publish(ctx context.Context, key, value string, ttl time.Duration) (string, error) {
	if err := c.allowWrite("publish", key); err != nil {
		return "", err
	}
	if c.redlock != nil {
		return c.redlock.nodes[0].Publish(ctx, key, value, ttl)
	}
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if err := validateTTL(ttl); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	v, err := publishScript.Run(ctx, c.rdb, []string{key}, value, ttl.Milliseconds()).Text()
	if err != nil {
		return "", c.callError("publish", key, err)
	}
	return v, nil
}
