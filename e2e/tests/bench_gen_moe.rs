//! rcpu-bench's mixture-of-experts presets (gen_moe.rs) against real ORT: the gpt-oss layout, its
//! large weights in a side file, runs on ORT's CPU EP and gives rcpu's session the same logits;
//! Phi-3.5-MoE runs in its fused form, and ORT's CPU EP refuses its fc3 form (the builder's) at
//! run time, which is why `fc3=0` exists.

use std::path::{Path, PathBuf};

use rcpu_e2e::bench::gen_llm::Llm;
use rcpu_e2e::bench::llm_model::{step_feeds, Kv};
use rcpu_e2e::bench::model::ModelInfo;
use rcpu_e2e::compare::rel_l2;
use rcpu_e2e::{Ort, Session, SessionSpec, Tensor};

/// The model of `rest` written with its large weights in `model.onnx.data` under a scratch
/// directory (`tag` names it): the model's bytes, its info and the directory.
fn write_external(rest: &str, tag: &str) -> (Vec<u8>, ModelInfo, PathBuf) {
    let l = Llm::parse("s", rest).unwrap();
    let dir = std::env::temp_dir().join(format!("rcpu-moe-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let g = l.generate_external(&dir.join("model.onnx.data")).unwrap();
    let info = ModelInfo::parse(&g.bytes).unwrap();
    (g.bytes, info, dir)
}

/// `spec` finding the side file in `dir` (the session is made from the model's bytes).
fn beside(mut spec: SessionSpec, dir: &Path) -> SessionSpec {
    spec.config.push((
        "session.model_external_initializers_file_folder_path".into(),
        dir.display().to_string(),
    ));
    spec
}

/// The feeds of `seq` tokens after `past` positions, then the logits of `s` for them.
fn logits(s: &Session, info: &ModelInfo, seq: usize, past: usize) -> Tensor {
    let feeds = step_feeds(info, seq, past, 300, 3, Kv::Copy).unwrap();
    s.run(&feeds).unwrap().swap_remove(0)
}

fn rms(v: &[f32]) -> f32 {
    (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt()
}

/// gpt-oss cut to 2 layers of hidden 256 (experts of 2048, so fc1 and fc2 pass 1 MiB and go to
/// the side file), accuracy level 0: ORT runs it (a prefill of 5 tokens and a decode step after
/// 130 positions, more than the 128-position window of layer 0's windowed cache) with finite,
/// spread logits, and rcpu's session gives the same logits.
#[test]
fn gpt_oss_runs_from_its_side_file_on_ort_and_rcpu() {
    let rest = "preset=gpt-oss-20b,layers=2,vocab=300,hidden=256,heads=4,kv=2,inter=2048,\
                experts=8,topk=2,acc=0,ctx=256";
    let (bytes, info, dir) = write_external(rest, "gptoss");
    assert!(info.external_data);
    assert!(info.ops.iter().any(|o| o == "QMoE"), "{:?}", info.ops);
    let ort = rcpu_e2e::ort_with_rcpu();
    let theirs = ort
        .session(&bytes, &beside(SessionSpec::ort(Some(1)), &dir))
        .unwrap();
    let ours = ort
        .session(
            &bytes,
            &beside(SessionSpec::rcpu(&[("threads", "2")]), &dir),
        )
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    for (seq, past) in [(5, 130), (1, 135)] {
        let r = logits(&theirs, &info, seq, past);
        assert_eq!(r.shape, vec![1, seq as i64, 300]);
        let v = r.as_f32();
        assert!(
            v.iter().all(|x| x.is_finite()),
            "seq {seq}: non-finite logits"
        );
        let spread = rms(v);
        assert!(
            spread > 0.1 && spread < 10.0,
            "seq {seq}: logits rms {spread}"
        );
        let a = logits(&ours, &info, seq, past);
        let err = rel_l2(a.as_f32(), v);
        assert!(
            err <= 1e-4,
            "seq {seq} past {past}: rcpu vs ORT rel L2 {err}"
        );
    }
}

/// Phi-3.5-MoE cut down: with `fc3=0` (gate and up fused in fc1) ORT's CPU EP runs it; in the
/// builder's fc3 form the session loads and the run fails with ORT's "FC3 gating is not yet
/// implemented on CPU" (ORT 1.31.1; when ORT implements it, fc3=1 becomes measurable too).
#[test]
fn phi_moe_runs_fused_and_ort_cpu_refuses_its_fc3_form() {
    let ort = Ort::get();
    let base = "preset=phi3.5-moe,layers=1,vocab=300,hidden=256,heads=4,kv=2,head=64,inter=128,\
                experts=4";
    for fc3 in [0, 1] {
        let (bytes, info, dir) = write_external(&format!("{base},fc3={fc3}"), "phi");
        let s = ort
            .session(&bytes, &beside(SessionSpec::ort(Some(1)), &dir))
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let feeds = step_feeds(&info, 4, 0, 300, 3, Kv::Copy).unwrap();
        match (fc3, s.run(&feeds)) {
            (0, Ok(out)) => {
                assert_eq!(out[0].shape, vec![1, 4, 300]);
                let v = out[0].as_f32();
                assert!(v.iter().all(|x| x.is_finite()) && rms(v) > 0.1);
            }
            (1, Err(e)) => assert!(e.contains("FC3 gating"), "{e}"),
            (f, r) => panic!("fc3={f}: unexpected {:?}", r.map(|o| o.len())),
        }
    }
}
