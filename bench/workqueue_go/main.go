// Command workqueue_go measures k8s.io/client-go/util/workqueue doing the same work
// as bench/workqueue_bench.py, so the two can be compared on one machine in one run.
//
// Each case prints one JSON object per line on stdout. Unnamed queues record no
// metrics; named ones record through component-base's Prometheus provider.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	// Registers the Prometheus metrics provider Kubernetes components use, so a
	// named queue records metrics like the Python queue with a name does.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

type result struct {
	Impl       string  `json:"impl"`
	Case       string  `json:"case"`
	Workers    int     `json:"workers"`
	Keys       int     `json:"keys"`
	Ops        int     `json:"ops"`
	Metrics    bool    `json:"metrics"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	Repeats    int     `json:"repeats"`
	GoMaxProcs int     `json:"gomaxprocs"`
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("default/buildrun-%d", i)
	}
	return out
}

// cycles adds every key, lets the workers get and done them all, and repeats for
// rounds rounds: rounds*len(ks) add/get/done cycles.
func cycles(ks []string, workers, rounds int, name string) time.Duration {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name})
	var round sync.WaitGroup
	var stopped sync.WaitGroup
	for w := 0; w < workers; w++ {
		stopped.Add(1)
		go func() {
			defer stopped.Done()
			for {
				item, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(item)
				round.Done()
			}
		}()
	}
	start := time.Now()
	for r := 0; r < rounds; r++ {
		round.Add(len(ks))
		for _, k := range ks {
			q.Add(k)
		}
		round.Wait()
	}
	elapsed := time.Since(start)
	q.ShutDown()
	stopped.Wait()
	return elapsed
}

// handoff adds one key at a time to one blocked worker and waits for its Done:
// the cost of waking a worker.
func handoff(ks []string, name string) time.Duration {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name})
	processed := make(chan struct{})
	go func() {
		for {
			item, shutdown := q.Get()
			if shutdown {
				return
			}
			q.Done(item)
			processed <- struct{}{}
		}
	}()
	start := time.Now()
	for _, k := range ks {
		q.Add(k)
		<-processed
	}
	elapsed := time.Since(start)
	q.ShutDown()
	return elapsed
}

// addAfter times len(ks) AddAfter calls with delays spread over 0-1 ms, and then
// the whole trip until every key has been handed out and done.
func addAfter(ks []string, workers int, name string) (calls, total time.Duration) {
	q := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: name})
	var all sync.WaitGroup
	all.Add(len(ks))
	var stopped sync.WaitGroup
	for w := 0; w < workers; w++ {
		stopped.Add(1)
		go func() {
			defer stopped.Done()
			for {
				item, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(item)
				all.Done()
			}
		}()
	}
	start := time.Now()
	for i, k := range ks {
		q.AddAfter(k, time.Duration(1+i%1000)*time.Microsecond)
	}
	calls = time.Since(start)
	all.Wait()
	total = time.Since(start)
	q.ShutDown()
	stopped.Wait()
	return calls, total
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func main() {
	repeats := flag.Int("repeats", 5, "runs per case; the median is reported")
	ops := flag.Int("ops", 200000, "add/get/done cycles per run")
	flag.Parse()

	emit := func(r result) {
		r.Impl, r.Repeats, r.GoMaxProcs = "go", *repeats, runtime.GOMAXPROCS(0)
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			panic(err)
		}
	}
	// Unnamed queues record no metrics; named ones record through the provider.
	for _, name := range []string{"", "bench"} {
		metrics := name != ""
		for _, n := range []int{1000, 100000} {
			ks := keys(n)
			rounds := max(1, *ops/n)
			for _, workers := range []int{1, 8} {
				runs := make([]time.Duration, *repeats)
				for i := range runs {
					runs[i] = cycles(ks, workers, rounds, name)
				}
				done := rounds * n
				emit(result{Case: "cycle", Workers: workers, Keys: n, Ops: done, Metrics: metrics,
					OpsPerSec: float64(done) / median(runs).Seconds()})
			}
		}
		ks := keys(*ops / 10)
		runs := make([]time.Duration, *repeats)
		for i := range runs {
			runs[i] = handoff(ks, name)
		}
		emit(result{Case: "handoff", Workers: 1, Keys: len(ks), Ops: len(ks), Metrics: metrics,
			OpsPerSec: float64(len(ks)) / median(runs).Seconds()})
		ks = keys(100000)
		callRuns := make([]time.Duration, *repeats)
		totalRuns := make([]time.Duration, *repeats)
		for i := range callRuns {
			callRuns[i], totalRuns[i] = addAfter(ks, 8, name)
		}
		emit(result{Case: "add_after_calls", Workers: 8, Keys: len(ks), Ops: len(ks), Metrics: metrics,
			OpsPerSec: float64(len(ks)) / median(callRuns).Seconds()})
		emit(result{Case: "add_after_total", Workers: 8, Keys: len(ks), Ops: len(ks), Metrics: metrics,
			OpsPerSec: float64(len(ks)) / median(totalRuns).Seconds()})
	}
}
