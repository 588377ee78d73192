module github.com/redlimit/redlimit/internal/modproxy

go 1.25.0

require (
	github.com/stretchr/testify v1.12.1
	golang.org/x/mod v0.40.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
