// Package slot computes Redis Cluster hash slots, as CLUSTER KEYSLOT does.
package slot

import "strings"

// Count is the number of Redis Cluster hash slots.
const Count = 16384

// Of returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, the part between the first '{' and the next '}' when that part is
// not empty, or of the whole key, modulo 16384.
func Of(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ table[byte(crc>>8)^key[i]]
	}
	return int(crc) % Count
}

// table is the CRC16 (XMODEM, polynomial 0x1021) of every byte.
var table = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()
