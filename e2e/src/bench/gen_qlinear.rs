//! `qlinear:` models for the bench: chains of ONNX QLinearMatMul with a constant 8-bit B.
//!
//! Spec items besides `k, n, m, layers, seed`: `a=u8|i8` (A and output type, default u8),
//! `b=u8|i8` (B type, default i8), `percol` (per-column
//! b_scale and b_zero_point `[N]` instead of per tensor). int8 A with uint8 B is rejected (ORT's
//! CPU EP has no kernel for it). For uint8 A x int8 B, B is drawn from [-64, 63] so ORT's AVX2
//! kernel (int16-saturating `vpmaddubsw` on CPUs without VNNI) is exact and parity is exact.
//! The output scale keeps every layer's output spread over the 8-bit range.

use crate::onnx::{dtype, GraphBuilder};

/// The QLinearMatMul options of a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QLinear {
    pub a_signed: bool,
    pub b_signed: bool,
    pub per_column: bool,
}

impl Default for QLinear {
    fn default() -> Self {
        QLinear {
            a_signed: false,
            b_signed: true,
            per_column: false,
        }
    }
}

fn sign(val: &str, key: &str) -> Result<bool, String> {
    match val {
        "u8" => Ok(false),
        "i8" | "s8" => Ok(true),
        _ => Err(format!("{key}='{val}': expected u8 or i8")),
    }
}

impl QLinear {
    /// Takes one spec item (`a=`, `b=`, `percol`); `Ok(false)` when it is not one of these.
    pub fn parse_item(&mut self, item: &str) -> Result<bool, String> {
        match item.split_once('=') {
            None if item == "percol" => self.per_column = true,
            Some(("a", v)) => self.a_signed = sign(v, "a")?,
            Some(("b", v)) => self.b_signed = sign(v, "b")?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.a_signed && !self.b_signed {
            return Err("a=i8 with b=u8 has no ORT CPU kernel (use b=i8)".into());
        }
        Ok(())
    }

    /// The element type of A and of the output.
    pub fn a_elem(&self) -> i32 {
        if self.a_signed {
            dtype::INT8
        } else {
            dtype::UINT8
        }
    }

    pub fn label(&self) -> String {
        let t = |s: bool| if s { "i8" } else { "u8" };
        format!(
            "a={} b={} {}",
            t(self.a_signed),
            t(self.b_signed),
            if self.per_column {
                "percol"
            } else {
                "pertensor"
            }
        )
    }

    /// One QLinearMatMul layer `input [m, k] -> out [m, n]`; returns its initializer bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn layer(
        &self,
        g: &mut GraphBuilder,
        i: usize,
        input: &str,
        out: &str,
        k: usize,
        n: usize,
        seed: u64,
    ) -> u64 {
        let be = if self.b_signed {
            dtype::INT8
        } else {
            dtype::UINT8
        };
        let rnd = super::gen::rand_bytes(k * n, seed);
        let b: Vec<u8> = if self.b_signed && !self.a_signed {
            rnd.iter().map(|v| ((*v as i8) >> 1) as u8).collect() // [-64, 63]
        } else {
            rnd
        };
        // Zero points near the middle of each type's range.
        let mid =
            |signed: bool, v: u8| ((if signed { 0i32 } else { 128 }) + (v % 16) as i32 - 8) as u8;
        let cols = if self.per_column { n } else { 1 };
        let r = crate::rand_f32(cols + 2, seed ^ 0x5ca1e);
        let b_scale: Vec<f32> = r[..cols].iter().map(|v| 0.01 * (1.5 + 0.5 * v)).collect();
        let zb = super::gen::rand_bytes(cols + 2, seed ^ 0x2e70);
        let b_zero: Vec<u8> = zb[..cols].iter().map(|&v| mid(self.b_signed, v)).collect();
        let a_scale = 0.02f32;
        // Typical |acc| ~ sqrt(k) * 74 * 74 (uniform 8-bit data): map it to about +-90.
        let y_scale = a_scale * 0.015 * (k as f32).sqrt() * 5500.0 / 90.0;
        let ae = self.a_elem();
        let names: Vec<String> = ["a_scale", "a_zp", "B", "b_scale", "b_zp", "y_scale", "y_zp"]
            .iter()
            .map(|s| format!("{s}{i}"))
            .collect();
        let pdims: Vec<i64> = if self.per_column {
            vec![n as i64]
        } else {
            vec![]
        };
        g.initializer_f32(&names[0], &[], &[a_scale]);
        g.initializer_raw(&names[1], ae, &[], vec![mid(self.a_signed, zb[cols])]);
        g.initializer_raw(&names[2], be, &[k as i64, n as i64], b.clone());
        g.initializer_f32(&names[3], &pdims, &b_scale);
        g.initializer_raw(&names[4], be, &pdims, b_zero.clone());
        g.initializer_f32(&names[5], &[], &[y_scale]);
        g.initializer_raw(&names[6], ae, &[], vec![mid(self.a_signed, zb[cols + 1])]);
        let ins: Vec<&str> = [input]
            .into_iter()
            .chain(names[..2].iter().map(String::as_str))
            .chain(names[2..].iter().map(String::as_str))
            .collect();
        g.node(
            "QLinearMatMul",
            "",
            &format!("qlinearmatmul{i}"),
            &ins,
            &[out],
            &[],
        );
        (b.len() + b_scale.len() * 4 + b_zero.len() + 10) as u64
    }
}
