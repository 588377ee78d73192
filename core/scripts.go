package core

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Every script is lib.lua followed by its own body, run with EVALSHA and
// sent whole (EVAL) only when the server's script cache lacks it.
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

	scriptAcquire    = redis.NewScript(luaLib + luaAcquire)
	scriptAvailable  = redis.NewScript(luaLib + luaAvailable)
	scriptRelease    = redis.NewScript(luaLib + luaRelease)
	scriptTrySetRate = redis.NewScript(luaLib + luaTrySetRate)
	scriptSetRate    = redis.NewScript(luaLib + luaSetRate)
	scriptConfig     = redis.NewScript(luaLib + luaConfig)
	scriptExpire     = redis.NewScript(luaExpire)
)

// Reply codes shared by the scripts (see lua/lib.lua).
const (
	codeOK             = 0
	codeNotInitialized = 1
	codeExceedsRate    = 2
	codeInvalidConfig  = 3
)
