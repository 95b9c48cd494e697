//! Hand-written SVGs: the gap sweep (p50 latency and CPU per token against the gap, both arms)
//! and the demo's per-token latency of a generation (all arms).

use super::gap::GapRow;

const W: f64 = 420.0;
const H: f64 = 300.0;
const PAD: f64 = 50.0;

fn panel(x0: f64, title: &str, rows: &[GapRow], gaps: &[u64], val: fn(&GapRow) -> f64) -> String {
    let ymax = rows
        .iter()
        .map(val)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let xs = |i: usize| x0 + PAD + (W - 2.0 * PAD) * i as f64 / (gaps.len().max(2) - 1) as f64;
    let ys = |v: f64| H - PAD - (H - 2.0 * PAD) * v / ymax;
    let mut s = format!(
        "<text x='{}' y='20' font-size='14' text-anchor='middle'>{title}</text>\
         <line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/><line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/>",
        x0 + W / 2.0,
        x0 + PAD,
        H - PAD,
        x0 + W - PAD,
        H - PAD,
        x0 + PAD,
        PAD,
        x0 + PAD,
        H - PAD
    );
    for (i, g) in gaps.iter().enumerate() {
        s += &format!(
            "<text x='{}' y='{}' font-size='10' text-anchor='middle'>{g}</text>",
            xs(i),
            H - PAD + 14.0
        );
    }
    s += &format!(
        "<text x='{}' y='{}' font-size='10' text-anchor='middle'>gap (us)</text>",
        x0 + W / 2.0,
        H - 12.0
    );
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        s += &format!(
            "<text x='{}' y='{}' font-size='10' text-anchor='end'>{v:.3}</text>",
            x0 + PAD - 4.0,
            ys(v) + 3.0
        );
    }
    for (arm, color) in [("ort", "#d62728"), ("rcpu", "#1f77b4")] {
        let pts: Vec<String> = gaps
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                rows.iter()
                    .find(|r| r.arm == arm && r.gap_us == *g)
                    .map(|r| (i, val(r)))
            })
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", xs(i), ys(v)))
            .collect();
        s += &format!(
            "<polyline fill='none' stroke='{color}' stroke-width='2' points='{}'/>",
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            s += &format!("<circle cx='{x}' cy='{y}' r='3' fill='{color}'/>");
        }
    }
    s
}

/// The whole document.
pub fn gap_plot(label: &str, rows: &[GapRow]) -> String {
    let mut gaps: Vec<u64> = rows.iter().map(|r| r.gap_us).collect();
    gaps.sort_unstable();
    gaps.dedup();
    format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif'>\
         <rect width='100%' height='100%' fill='white'/>{}{}\
         <text x='{}' y='{}' font-size='11' text-anchor='middle'>{} | red: ORT CPU EP, blue: rcpu</text></svg>\n",
        2.0 * W,
        H + 20.0,
        panel(0.0, "p50 latency (us)", rows, &gaps, |r| r.p50_us),
        panel(W, "CPU ms per token", rows, &gaps, |r| r.cpu_ms_per_token),
        W,
        H + 12.0,
        label.replace('<', "&lt;")
    )
}

/// One line of the per-token latency plot.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    /// Drawn lightly (thin, dashed, translucent): the null arm.
    pub light: bool,
    /// ms per token, by token index (0 = the first decode step).
    pub ms: &'a [f64],
}

/// Per-token latency of a generation: decode step index against ms, one polyline per series;
/// `title` above, `label` (the model) under it in small print, the legend under that.
pub fn token_latency_plot(title: &str, label: &str, series: &[Series<'_>]) -> String {
    let (w, h, pad) = (900.0, 400.0, 64.0);
    let n = series.iter().map(|s| s.ms.len()).max().unwrap_or(0).max(2);
    let ymax = series
        .iter()
        .flat_map(|s| s.ms.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let xs = |i: usize| pad + (w - 2.0 * pad) * i as f64 / (n - 1) as f64;
    let ys = |v: f64| h - pad - (h - 2.0 * pad) * v / ymax;
    let esc = |t: &str| t.replace('&', "&amp;").replace('<', "&lt;");
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif'>\
         <rect width='100%' height='100%' fill='white'/>\
         <text x='{}' y='18' font-size='14' text-anchor='middle'>{}</text>\
         <text x='{}' y='33' font-size='10' text-anchor='middle'>{}</text>\
         <line x1='{pad}' y1='{}' x2='{}' y2='{}' stroke='black'/>\
         <line x1='{pad}' y1='{pad}' x2='{pad}' y2='{}' stroke='black'/>\
         <text x='{}' y='{}' font-size='11' text-anchor='middle'>decode step (token index)</text>\
         <text x='14' y='{}' font-size='11' text-anchor='middle' transform='rotate(-90 14 {})'>ms per token</text>",
        w / 2.0,
        esc(title),
        w / 2.0,
        esc(label),
        h - pad,
        w - pad,
        h - pad,
        h - pad,
        w / 2.0,
        h - 14.0,
        h / 2.0,
        h / 2.0
    );
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        s += &format!(
            "<text x='{}' y='{:.1}' font-size='10' text-anchor='end'>{v:.1}</text>",
            pad - 4.0,
            ys(v) + 3.0
        );
    }
    let mut ticks: Vec<usize> = (0..=4).map(|k| (n - 1) * k / 4).collect();
    ticks.dedup();
    for i in ticks {
        s += &format!(
            "<text x='{:.1}' y='{}' font-size='10' text-anchor='middle'>{}</text>",
            xs(i),
            h - pad + 14.0,
            i + 1
        );
    }
    for (j, line) in series.iter().enumerate() {
        let pts: Vec<String> = line
            .ms
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", xs(i), ys(*v)))
            .collect();
        let style = if line.light {
            "stroke-width='1' stroke-dasharray='4 3' opacity='0.5'"
        } else {
            "stroke-width='2'"
        };
        s += &format!(
            "<polyline fill='none' stroke='{}' {style} points='{}'/>",
            line.color,
            pts.join(" ")
        );
        s += &format!(
            "<text x='{}' y='{}' font-size='11' fill='{}'>{}</text>",
            pad + 160.0 * j as f64,
            pad - 14.0,
            line.color,
            esc(line.name)
        );
    }
    s + "</svg>\n"
}
