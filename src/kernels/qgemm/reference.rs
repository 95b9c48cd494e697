//! Naive QLinearMatMul of one 2-D product over ONNX's layout (test ground truth): exact
//! `sum (a - za)(b - zb)` in i64, wrapped to int32 as MLAS accumulates, then the float
//! requantization ORT performs (`f32(acc) * (a_scale * b_scale / y_scale)`, clamp, round half
//! to even, add the output zero point).

/// Quantization parameters of one product, as the ONNX node gives them.
#[derive(Debug, Clone)]
pub struct RefParams {
    pub a_signed: bool,
    pub b_signed: bool,
    pub a_scale: f32,
    pub a_zero: i32,
    /// One value (per tensor) or one per column.
    pub b_scale: Vec<f32>,
    pub b_zero: Vec<i32>,
    pub y_scale: f32,
    pub y_zero: i32,
}

fn byte(v: u8, signed: bool) -> i64 {
    if signed {
        v as i8 as i64
    } else {
        v as i64
    }
}

fn pick<T: Copy>(v: &[T], c: usize) -> T {
    if v.len() == 1 {
        v[0]
    } else {
        v[c]
    }
}

/// `[m, n]` output bytes (int8 outputs as their bit patterns) of A `[m, k]` times B `[k, n]`.
pub fn qlinear_matmul_ref(
    a: &[u8],
    b: &[u8],
    m: usize,
    k: usize,
    n: usize,
    p: &RefParams,
) -> Vec<u8> {
    let (lo, hi) = if p.a_signed {
        (-128i32, 127i32)
    } else {
        (0, 255)
    };
    let mut y = vec![0u8; m * n];
    for i in 0..m {
        for c in 0..n {
            let zb = pick(&p.b_zero, c) as i64;
            let mut s = 0i64;
            for kk in 0..k {
                let av = byte(a[i * k + kk], p.a_signed) - p.a_zero as i64;
                let bv = byte(b[kk * n + c], p.b_signed) - zb;
                s += av * bv;
            }
            let acc = s as i32; // int32 accumulation wraps
            let scale = p.a_scale * pick(&p.b_scale, c) / p.y_scale;
            let f = acc as f32 * scale;
            let f = f.max((lo - p.y_zero) as f32).min((hi - p.y_zero) as f32);
            y[i * n + c] = (f.round_ties_even() as i32 + p.y_zero) as u8;
        }
    }
    y
}
