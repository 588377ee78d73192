module github.com/redlimit/redlimit/echo5rl

go 1.25.0

replace github.com/redlimit/redlimit => ../

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/labstack/echo/v5 v5.4.4
	github.com/redis/go-redis/v9 v9.22.0
	github.com/redlimit/redlimit v0.1.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)
