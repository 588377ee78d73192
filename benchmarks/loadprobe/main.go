// Command loadprobe sends requests to one or more servers from many source
// addresses on 127.0.0.0/8 (each address its own client, its own
// connections), all at once or spread over a time, and prints how many
// requests each address had served: the distribution a per-IP limit should
// bound. It is how the observed figures against the example servers in
// RELIABILITY.md were taken.
//
//	go run ./loadprobe -targets http://127.0.0.1:8081,http://127.0.0.1:8082 -addrs 1000 -per 15
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// The flags.
var (
	targets = flag.String("targets", "http://127.0.0.1:8080", "comma-separated base URLs, taken in turns")
	addrs   = flag.Int("addrs", 1000, "source addresses, 127.20.0.1 onwards (at most 62 500)")
	per     = flag.Int("per", 15, "requests per address")
	path    = flag.String("path", "/", "the path of every request")
	method  = flag.String("method", http.MethodGet, "the method of every request")
	spread  = flag.Duration("spread", 0, "spread each address's requests evenly over this time (0: all at once)")
	timeout = flag.Duration("timeout", 10*time.Second, "client timeout per request")
)

func main() {
	flag.Parse()
	if *addrs < 1 || *addrs > 62_500 || *per < 1 {
		fmt.Println("loadprobe: -addrs must be 1 to 62 500 and -per at least 1")
		return
	}
	urls := strings.Split(*targets, ",")

	var (
		mu       sync.Mutex
		served   = make([]int, *addrs)
		statuses = map[string]int{}
		slowest  time.Duration
		wg       sync.WaitGroup
	)
	start := time.Now()
	for a := range *addrs {
		ip := net.IPv4(127, 20, byte(a/250), byte(a%250+1))
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
		c := &http.Client{Timeout: *timeout, Transport: &http.Transport{DialContext: dialer.DialContext}}
		for i := range *per {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * *spread / time.Duration(*per))
				req, err := http.NewRequest(*method, urls[(a+i)%len(urls)]+*path, nil)
				if err != nil {
					panic(err) // a bad -targets or -path
				}
				t0 := time.Now()
				resp, err := c.Do(req)
				status := "error"
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					status = fmt.Sprint(resp.StatusCode)
				}
				took := time.Since(t0)
				mu.Lock()
				defer mu.Unlock()
				statuses[status]++
				slowest = max(slowest, took)
				if err == nil && resp.StatusCode == http.StatusOK {
					served[a]++
				}
			})
		}
	}
	wg.Wait()
	fmt.Printf("%d requests in %v, slowest %v; statuses %v\n", *addrs**per, time.Since(start).Round(time.Millisecond),
		slowest.Round(time.Millisecond), statuses)
	count := map[int]int{}
	for _, n := range served {
		count[n]++
	}
	var ns []int
	for n := range count {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	fmt.Print("addresses by requests served:")
	for _, n := range ns {
		fmt.Printf(" %d served: %d;", n, count[n])
	}
	fmt.Println()
}
