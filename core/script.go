package core

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"
)

// A script is one of the Lua scripts, with lib.lua (the rules they share)
// in front when it uses them. It is run with EVALSHA, and sent whole (EVAL)
// only when the server's script cache lacks it.
type script struct {
	name string
	sha  string
	src  string
	// declared: it takes the keys its limiter declares (three for a rate
	// given in code), not all five.
	declared bool
}

func newScript(name, src string, declared bool) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, sha: hex.EncodeToString(sum[:]), src: src, declared: declared}
}

var (
	//go:embed lua/lib.lua
	luaLib string
	//go:embed lua/acquire.lua
	luaAcquire string
	//go:embed lua/available.lua
	luaAvailable string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/trysetrate.lua
	luaTrySetRate string
	//go:embed lua/setrate.lua
	luaSetRate string
	//go:embed lua/config.lua
	luaConfig string
	//go:embed lua/expire.lua
	luaExpire string
	//go:embed lua/delete.lua
	luaDelete string
	//go:embed lua/charge.lua
	luaCharge string
	//go:embed lua/sem_lib.lua
	luaSemLib string
	//go:embed lua/sem_acquire.lua
	luaSemAcquire string
	//go:embed lua/sem_release.lua
	luaSemRelease string
	//go:embed lua/sem_renew.lua
	luaSemRenew string
	//go:embed lua/sem_available.lua
	luaSemAvailable string
	//go:embed lua/quota.lua
	luaQuota string

	scriptAcquire    = newScript("acquire", luaLib+luaAcquire, true)
	scriptAvailable  = newScript("available", luaLib+luaAvailable, true)
	scriptRelease    = newScript("release", luaLib+luaRelease, true)
	scriptCharge     = newScript("charge", luaLib+luaCharge, true)
	scriptQuota      = newScript("quota", luaLib+luaQuota, true)
	scriptTrySetRate = newScript("try set rate", luaLib+luaTrySetRate, false)
	scriptSetRate    = newScript("set rate", luaLib+luaSetRate, false)
	scriptConfig     = newScript("config", luaLib+luaConfig, false)
	scriptExpire     = newScript("expire", luaExpire, false)
	scriptDelete     = newScript("delete", luaDelete, false)

	// The semaphore's: lib.lua for the clock, then sem_lib.lua. They take
	// the two keys a semaphore declares (see Semaphore).
	scriptSemAcquire   = newScript("semaphore acquire", luaLib+luaSemLib+luaSemAcquire, true)
	scriptSemRelease   = newScript("semaphore release", luaLib+luaSemLib+luaSemRelease, true)
	scriptSemRenew     = newScript("semaphore renew", luaLib+luaSemLib+luaSemRenew, true)
	scriptSemAvailable = newScript("semaphore available", luaLib+luaSemLib+luaSemAvailable, true)
)

// scripts are all of them, for Client.Check.
var scripts = []*script{scriptAcquire, scriptAvailable, scriptRelease, scriptTrySetRate, scriptSetRate,
	scriptConfig, scriptCharge, scriptQuota, scriptExpire, scriptDelete,
	scriptSemAcquire, scriptSemRelease, scriptSemRenew, scriptSemAvailable}

// isNoScript reports whether err is Redis's answer to an EVALSHA of a
// script it does not have.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// isTryAgain reports whether err is a Redis Cluster's TRYAGAIN: a
// multi-key command whose keys are not all on the node while their slot
// moves.
func isTryAgain(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN")
}
