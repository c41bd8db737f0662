package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Colours of the systems, in table order.
var palette = map[string]color.RGBA{
	"ceiling":          {0xb0, 0xb0, 0xb0, 0xff},
	"envoy":            {0xe4, 0x57, 0x2e, 0xff},
	"gubernator":       {0xf3, 0xa7, 0x12, 0xff},
	"velvetrope-async": {0x29, 0x33, 0x5c, 0xff},
	"velvetrope-sync":  {0x66, 0x9b, 0xbc, 0xff},
}

// writeChart draws two rows of panels, one panel per connection count: a
// group of bars per key spread, one bar per system; above, requests/s
// with the p99 written over each bar; below, the whole system's CPU
// milliseconds per 1,000 decisions (the ceiling does no work and has none).
func writeChart(path string, r report) error {
	systems, conns, keys := r.axes()
	const (
		panelW, panelH = 620, 420
		margin         = 50
	)
	w, h := max(panelW*len(conns)+margin, 1100), 2*panelH+120
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	ink := color.RGBA{0x22, 0x22, 0x22, 0xff}
	text(img, margin, 22, ink, fmt.Sprintf("per system and key spread, %d callers, %s, commit %s",
		r.Callers, r.Started.UTC().Format("2006-01-02"), r.Commit))
	rate := func(x *row) (float64, string) {
		return x.Result.PerSecond, fmt.Sprintf("%.0f", float64(x.Result.P99)/1e6)
	}
	cpu := func(x *row) (float64, string) {
		if x.System == "ceiling" {
			return 0, ""
		}
		return x.SystemCPUPer1000, fmt.Sprintf("%.0f", x.SystemCPUPer1000)
	}
	panels(img, r, systems, conns, keys, 60, "requests/s (p99 in ms above each bar)", rate)
	panels(img, r, systems, conns, keys, 60+panelH, "whole-system CPU ms / 1,000 decisions", cpu)
	// legend
	lx, ly := margin, h-40
	for _, sys := range systems {
		fill(img, image.Rect(lx, ly-10, lx+12, ly+2), palette[sys])
		text(img, lx+16, ly, ink, plain(label(sys)))
		lx += 8*len(plain(label(sys))) + 40
	}
	text(img, margin, h-14, ink, "the load generator shares the cores with the servers, Redis and Kafka; its CPU is not counted")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// panels draws one row of panels at y0: value gives a row's bar and the
// note written above it.
func panels(img *image.RGBA, r report, systems []string, conns, keys []int64, y0 int, title string,
	value func(*row) (float64, string)) {
	const (
		panelW, panelH = 620, 420
		margin         = 50
	)
	ink := color.RGBA{0x22, 0x22, 0x22, 0xff}
	grid := color.RGBA{0xe6, 0xe6, 0xe6, 0xff}
	var top float64
	for i := range r.Rows {
		v, _ := value(&r.Rows[i])
		top = max(top, v)
	}
	top = niceCeil(top)
	for p, c := range conns {
		x0 := margin + p*panelW
		plotH := panelH - 80
		text(img, x0+10, y0, ink, fmt.Sprintf("%s, %d connection(s)", title, c))
		base := y0 + 20 + plotH
		for i := 0; i <= 4; i++ { // grid lines and their values
			y := base - plotH*i/4
			hline(img, x0+50, x0+panelW-20, y, grid)
			text(img, x0, y+4, ink, short(top*float64(i)/4))
		}
		groupW := (panelW - 80) / max(len(keys), 1)
		barW := (groupW - 20) / max(len(systems), 1)
		for g, k := range keys {
			gx := x0 + 60 + g*groupW
			for s, sys := range systems {
				x := r.find(sys, c, k)
				if x == nil {
					continue
				}
				v, note := value(x)
				bh := int(float64(plotH) * v / top)
				bx := gx + s*barW
				fill(img, image.Rect(bx+1, base-bh, bx+barW-1, base), palette[sys])
				text(img, bx, base-bh-4, ink, note)
			}
			text(img, gx+groupW/2-40, base+16, ink, fmt.Sprintf("%s key(s)", thousands(k)))
		}
		hline(img, x0+50, x0+panelW-20, base, ink)
	}
}

// plain drops markdown backquotes from a label.
func plain(s string) string {
	out := make([]rune, 0, len(s))
	for _, c := range s {
		if c != '`' {
			out = append(out, c)
		}
	}
	return string(out)
}

func text(img *image.RGBA, x, y int, c color.Color, s string) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// short writes 45000 as 45k and 12500 as 12.5k.
func short(v float64) string {
	switch {
	case v >= 1000 && int64(v)%1000 == 0:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}
