package benchrun

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/fsutil"
)

// variantColors colour the variants' lines: the original dark grey, the
// conversions from conversionColors in convert.Conversions' order.
var variantColors = func() map[convert.Form]color.Color {
	m := map[convert.Form]color.Color{convert.Original: color.RGBA{R: 0x33, G: 0x33, B: 0x33, A: 0xff}}
	for i, c := range convert.Conversions() {
		m[c.Form()] = conversionColors[i%len(conversionColors)]
	}
	return m
}()

// conversionColors are the conversions' colours, in convert.Conversions'
// order (window, performer, linformer, local-pooled, hedgehog, lara, then
// any added after them).
var conversionColors = []color.Color{
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	color.RGBA{R: 0x17, G: 0x9e, B: 0x8f, A: 0xff},
}

// plotLines are the lines Plot draws, in the order of the runs: every
// variant measured (window and hedgehog included), then every baseline
// with its index among the baselines (-1 for a variant).
func plotLines(r *Result) (forms []convert.Form, baseline []int) {
	seen := map[convert.Form]bool{}
	for _, run := range r.Runs {
		if !run.Baseline && !seen[run.Variant] {
			seen[run.Variant] = true
			forms, baseline = append(forms, run.Variant), append(baseline, -1)
		}
	}
	for i, b := range r.Baselines {
		forms, baseline = append(forms, convert.Form(b.Name)), append(baseline, i)
	}
	return forms, baseline
}

// baselineColors colour the baselines' (dashed) lines in order.
var baselineColors = []color.Color{
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

// Plot writes a PNG with two log-log panels, median time and peak RSS
// against sequence length, one line per variant and a dashed one per
// baseline (successful runs only).
func Plot(r *Result, path string) error {
	png, err := PlotPNG(r)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, png)
}

// PlotPNG is Plot's image, as PNG bytes.
func PlotPNG(r *Result) ([]byte, error) {
	panels := []struct {
		title, ylabel string
		value         func(Measurement) float64
	}{
		{"median time", "ms", func(b Measurement) float64 { return b.MedianMS }},
		{"peak memory (RSS)", "MiB", func(b Measurement) float64 { return b.PeakRSSMB }},
	}
	var plots []*plot.Plot
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "sequence length"
		p.Y.Label.Text = pn.ylabel
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = geomTicks{}, geomTicks{}
		p.Legend.Top, p.Legend.Left = false, false
		p.Add(plotter.NewGrid())
		lines := 0
		forms, baseline := plotLines(r)
		for i, f := range forms {
			var xys plotter.XYs
			for _, run := range r.Runs {
				if run.Variant == f && run.Status == "ok" && pn.value(run) > 0 {
					xys = append(xys, plotter.XY{X: float64(run.Length), Y: pn.value(run)})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("benchrun: plot: %w", err)
			}
			c, ok := variantColors[f]
			if !ok {
				c = color.Gray{Y: 0x80}
			}
			if baseline[i] >= 0 { // a baseline: dashed, in its own colour
				c = baselineColors[baseline[i]%len(baselineColors)]
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			l.Color, pts.Color = c, c
			l.Width = vg.Points(1.5)
			p.Add(l, pts)
			p.Legend.Add(legendName(r, f), l, pts)
			lines++
		}
		if lines == 0 {
			return nil, fmt.Errorf("benchrun: plot: no successful runs to plot")
		}
		plots = append(plots, p)
	}
	const w, h = 12 * vg.Inch, 5 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("benchrun: plot: %w", err)
	}
	return buf.Bytes(), nil
}

// geomTicks labels about six geometrically spaced values, rounded to two
// significant digits (powers of two when the range is wide enough), so
// that a log axis spanning less than a decade still has labels.
type geomTicks struct{}

func (geomTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) {
		return plot.LogTicks{}.Ticks(min, max)
	}
	var ticks []plot.Tick
	if max/min >= 4 {
		for v := math.Exp2(math.Ceil(math.Log2(min))); v <= max; v *= 2 {
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 6, 64)})
		}
		if len(ticks) > 8 { // thin to every other power
			var thin []plot.Tick
			for i, t := range ticks {
				if i%2 == len(ticks)%2 {
					thin = append(thin, t)
				} else {
					thin = append(thin, plot.Tick{Value: t.Value})
				}
			}
			ticks = thin
		}
		return ticks
	}
	seen := map[float64]bool{}
	for i := 0; i <= 5; i++ {
		v := min * math.Pow(max/min, float64(i)/5)
		r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 2, 64), 64)
		if r < min || r > max || seen[r] {
			continue
		}
		seen[r] = true
		ticks = append(ticks, plot.Tick{Value: r, Label: strconv.FormatFloat(r, 'g', 6, 64)})
	}
	return ticks
}

// legendName names a variant and the lengths where it did not run.
func legendName(r *Result, f convert.Form) string {
	var missed []string
	for _, run := range r.Runs {
		if run.Variant == f && run.Status != "ok" {
			missed = append(missed, fmt.Sprintf("%s at %d", run.Status, run.Length))
		}
	}
	if len(missed) == 0 {
		return string(f)
	}
	return fmt.Sprintf("%s (%s)", f, strings.Join(missed, ", "))
}
