package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/internal/nativeprof"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx/onnxpb"
)

type benchBackendsRow struct {
	SeqLen    int     `json:"seq_len"`
	NativeMS  float64 `json:"native_ms"`
	ORTMS     float64 `json:"ort_ms"`
	Ratio     float64 `json:"ratio"`
	NativeMin float64 `json:"native_min_ms"`
	NativeCPU float64 `json:"native_cpu_ms"`
	ORTCPU    float64 `json:"ort_cpu_ms"`
	// MaxScaledErr is the largest output error of native against
	// onnxruntime relative to the output's scale, from the first run.
	MaxScaledErr float64 `json:"max_scaled_err"`
	ORTMin       float64 `json:"ort_min_ms"`
}

type benchBackendsReport struct {
	Model   string             `json:"model"`
	Batch   int                `json:"batch"`
	Threads int                `json:"threads"`
	Repeat  int                `json:"repeat"`
	GEMM    string             `json:"native_gemm"`
	Rows    []benchBackendsRow `json:"rows"`
}

func runBenchBackends(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-backends", flag.ContinueOnError)
	seqLens := fs.String("lengths", "128,512", "comma-separated sequence lengths (K = 1024, e.g. 4K); short, as every length runs the whole model on both backends")
	layers := fs.Int("num-layers", 2, "encoder layers")
	batch := fs.Int("batch", 1, "batch size")
	threads := fs.Int("threads", cli.BenchThreads, "intra-op threads of both backends (fixed, not the backend default, so timings compare across runs and machines)")
	repeat := fs.Int("repeat", 5, "timed runs per backend and length (the backends alternate); the median is reported")
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of the weights and inputs")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	profile := fs.Bool("profile", false, "after timing, run the native backend once more per length and print the time per op type")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return cli.UsageError("bench-backends takes no positional arguments, got %q", pos[0])
	}
	lens, err := cli.Ints("lengths", *seqLens, cliutil.IntList{Min: 1})
	if err != nil {
		return err
	}
	if *profile && *asJSON {
		return cli.UsageError("--profile prints tables; it cannot be combined with --json")
	}
	if *layers <= 0 || *batch <= 0 || *threads <= 0 || *repeat <= 0 {
		return cli.UsageError("--num-layers, --batch, --threads and --repeat must be positive")
	}
	cfg := models.BaseConfig(*layers, max(512, slices.Max(lens)))
	cfg.Seed = *seed
	if err := cfg.Validate(); err != nil {
		return cli.UsageError("--lengths, --num-layers: %v", err)
	}
	m, err := models.BERT(cfg)
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	nat, ref, err := cli.OpenBothBackends(m, *threads)
	if err != nil {
		return err
	}
	defer nat.Close()
	defer ref.Close()
	rep := benchBackendsReport{
		Model: fmt.Sprintf("BERT hidden %d, %d heads, FFN %d, %d layers (models.BaseConfig)", cfg.Hidden, cfg.Heads, cfg.Intermediate, cfg.Layers),
		Batch: *batch, Threads: *threads, Repeat: *repeat, GEMM: gemm.Kernel(),
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "%s, batch %d, %d threads, median of %d alternating runs; native GEMM %s\n", rep.Model, *batch, *threads, *repeat, rep.GEMM)
	}
	for _, n := range lens {
		feed, err := infer.RandomInputs(m, ref.Inputs(), infer.RandomOptions{Batch: *batch, SeqLen: n, Seed: *seed})
		if err != nil {
			return cli.RuntimeFailure(err)
		}
		diffs, err := infer.CompareSessions(nat, ref, feed)
		if err != nil {
			return cli.RuntimeFailure(err)
		}
		worst := 0.0
		for _, d := range diffs {
			if d.Mismatch != "" || d.NaNMismatch > 0 {
				return cli.RuntimeFailure(fmt.Errorf("bench-backends: output %s: %v", d.Name, d.Diff))
			}
			worst = max(worst, d.Scaled)
		}
		ts, err := benchrun.TimeRuns([]infer.Session{nat, ref}, feed, 1, *repeat)
		if err != nil {
			return cli.RuntimeFailure(err)
		}
		ms := func(d interface{ Seconds() float64 }) float64 { return d.Seconds() * 1e3 }
		rep.Rows = append(rep.Rows, benchBackendsRow{SeqLen: n, NativeMS: ms(ts[0].Median), ORTMS: ms(ts[1].Median),
			Ratio: float64(ts[0].Median) / float64(ts[1].Median), NativeMin: ms(ts[0].Min), ORTMin: ms(ts[1].Min), MaxScaledErr: worst,
			NativeCPU: ms(ts[0].CPU), ORTCPU: ms(ts[1].CPU)})
	}
	if *asJSON {
		return cli.RuntimeFailure(cli.PrintJSON(stdout, rep))
	}
	if *profile {
		if err := printNativeProfile(stdout, m, *threads, lens, *batch, *seed, ref.Inputs()); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "seq\tnative ms\tort ms\tnative/ort\tfastest native/ort\tnative cpu ms\tort cpu ms\tmax error\t")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1e\t\n", r.SeqLen, r.NativeMS, r.ORTMS, r.Ratio, r.NativeMin/r.ORTMin, r.NativeCPU, r.ORTCPU, r.MaxScaledErr)
	}
	return tw.Flush()
}

// printNativeProfile runs a profiling native session twice per length
// and prints where the second run's time went (the first packs the
// weights).
func printNativeProfile(w io.Writer, m *onnxpb.ModelProto, threads int, lens []int, batch int, seed uint64, inputs []infer.Value) error {
	s, err := infer.NewNativeSessionWith(m, infer.NativeOptions{Options: infer.Options{Threads: threads}, Profile: true})
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	defer s.Close()
	for _, n := range lens {
		feed, err := infer.RandomInputs(m, inputs, infer.RandomOptions{Batch: batch, SeqLen: n, Seed: seed})
		if err != nil {
			return cli.RuntimeFailure(err)
		}
		if _, err := s.Run(feed); err != nil {
			return cli.RuntimeFailure(err)
		}
		before, _ := nativeprof.Read(s)
		if _, err := s.Run(feed); err != nil {
			return cli.RuntimeFailure(err)
		}
		after, _ := nativeprof.Read(s)
		prev := map[string]nativeprof.OpTime{}
		for _, t := range before {
			prev[t.Op] = t
		}
		var times []nativeprof.OpTime
		var total float64
		for _, t := range after {
			t.Calls -= prev[t.Op].Calls
			t.Total -= prev[t.Op].Total
			times = append(times, t)
			total += t.Total.Seconds()
		}
		slices.SortFunc(times, func(a, b nativeprof.OpTime) int { return int(b.Total - a.Total) })
		fmt.Fprintf(w, "native time per op type at seq %d (one run, %.1f ms in kernels):\n", n, total*1e3)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "op\tcalls\tms\tshare\t")
		for i, t := range times {
			if i == 12 {
				break
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.1f%%\t\n", t.Op, t.Calls, t.Total.Seconds()*1e3, 100*t.Total.Seconds()/total)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	return nil
}
