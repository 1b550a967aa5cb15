package lockclient

import "strings"

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the key, or of
// its {hash tag} when it has a non-empty one, modulo 16384.
func Slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// SameSlot checks that every key hashes to one Redis Cluster slot, as a script
// needs. Keys that are empty are ignored.
func SameSlot(keys ...string) error {
	first := ""
	for _, k := range keys {
		if k == "" {
			continue
		}
		if first == "" {
			first = k
			continue
		}
		if Slot(k) != Slot(first) {
			return invalidf("keys %q and %q hash to different Redis Cluster slots (%d, %d): use a {hash tag} in lock.key, e.g. '{settlement}:lock', so that all keys of a run share a slot", first, k, Slot(first), Slot(k))
		}
	}
	return nil
}
