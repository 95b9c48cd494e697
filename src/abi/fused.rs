//! The fused path: `OrtEp::Compile` turns each partition rcpu claimed as a group
//! (`ep::partition`) into an `OrtNodeComputeInfo` whose `Compute` runs the partition's nodes
//! itself, one ORT node per partition per run.
//!
//! At `Compile` each inner node gets the same `OpKernel` the per-node path would create (its
//! `KernelInfo` reads the subgraph's node), its constant inputs are offered to `prepack` as ORT
//! would offer them, and rcpu copies the constants a kernel did not pack: the partition is fused
//! with `drop_constant_initializers`, so ORT neither passes them per run nor has to keep them
//! (the subgraph is only valid during `Compile`). At `Compute` the nodes run in a topological
//! order of the subgraph over a frame (`abi::frame`); an inner node's error or panic names that
//! node, as on the per-node path. With provider option `step_times=on` a plan times its steps
//! (`telemetry::step_times`).

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::ep_types::*;
use super::frame::{Frame, NodeFrame, OwnedConst, SlotSrc, Slots, Wiring};
use super::graph::{Graph, Node, ValueInfo};
use super::kernel_context::{KernelContext, Staging};
use super::kernel_info::KernelInfo;
use super::status::{guard, guard_value, Error, Result};
use super::tensor::{ElemType, Tensor};
use crate::ep::capability::find_def;
use crate::ep::context::file::{ContextFile, PartitionOut};
use crate::ep::context::ContextOptions;
use crate::ep::fusion::{find_bias_adds, find_swiglus, gather, BiasAdd, NodeDesc};
use crate::ep::nodes::gather_block_quantized::{share_known_tied_codes, share_tied_codes};
use crate::ep::nodes::matmul_nbits::{fold_bias, packed_codes};
use crate::ep::nodes::swiglu::SwiGlu;
use crate::ep::op::PackedExport;
use crate::ep::op::PackedImport;
use crate::ep::op::{KernelEnv, OpKernel};
use crate::ep::spec::{PartitionSpec, ValueSpec};
use crate::memory::{self, ConstantBytes, ConstantCopy};
use crate::os::mapped::{FileMap, FileSlice};
use crate::telemetry::step_times;

/// One step of a run: an inner node, or nodes combined into one step; "Op node 'name'" for
/// errors; its wiring (a combined step's: its input and output values, and the values to
/// release after it, its parts' included).
struct Step {
    run: StepRun,
    /// The partition's node this step runs (`None`: a combined step, whose parts have theirs).
    node: Option<usize>,
    label: String,
    /// What the step is, for step timing: the node's op type, or the combined step's name.
    kind: String,
    wiring: Wiring,
}

enum StepRun {
    /// One node's kernel.
    Node(Box<dyn OpKernel>),
    /// A SwiGLU MLP's five nodes (`ep::fusion`): the combined step when it takes the run's
    /// input, else the parts one by one (each with its own wiring).
    SwiGlu(Box<SwiGluStep>),
}

struct SwiGluStep {
    fast: SwiGlu,
    parts: Vec<Step>,
}

impl Step {
    /// Every value slot this step reads or writes, its parts' included.
    fn touched(&self) -> Vec<usize> {
        let own = self
            .wiring
            .inputs
            .iter()
            .chain(&self.wiring.outputs)
            .flatten();
        let mut v: Vec<usize> = own.copied().collect();
        if let StepRun::SwiGlu(c) = &self.run {
            for p in &c.parts {
                v.extend(p.touched());
            }
        }
        v
    }
}

/// A compiled partition.
struct Plan {
    steps: Vec<Step>,
    slots: Slots,
    /// Frames not in use by a run (one per concurrent run at most).
    frames: Mutex<Vec<Frame>>,
    /// Step timing, when the session asked for it (provider option `step_times`).
    clock: Option<StepClock>,
    /// The tied tables (gather node, MatMulNBits node), for a context file (`ep::context`).
    tied: Vec<(usize, usize)>,
    /// The context file the plan was read from (kept open so that later sessions on it share
    /// its mapping and its checks, `ep::context::file`).
    context: Option<Arc<ContextFile>>,
}

/// How a plan with step timing sums a run (`telemetry::step_times`): the distinct step kinds,
/// and each step's index among them.
struct StepClock {
    kinds: Vec<String>,
    of_step: Vec<usize>,
}

impl StepClock {
    fn new(steps: &[Step]) -> StepClock {
        let mut kinds: Vec<String> = Vec::new();
        let of_step = steps
            .iter()
            .map(|st| match kinds.iter().position(|k| *k == st.kind) {
                Some(i) => i,
                None => {
                    kinds.push(st.kind.clone());
                    kinds.len() - 1
                }
            })
            .collect();
        StepClock { kinds, of_step }
    }
}

fn nanos_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One run's step times (only with step timing on): when it started, and (steps, ns) per
/// step kind of its plan's clock.
struct RunTally<'p> {
    clock: &'p StepClock,
    start: Instant,
    per_kind: Vec<(u64, u64)>,
}

impl<'p> RunTally<'p> {
    fn start(clock: &'p StepClock) -> RunTally<'p> {
        RunTally {
            clock,
            start: Instant::now(),
            per_kind: vec![(0, 0); clock.kinds.len()],
        }
    }

    /// Step `i` of the plan ran from `t` until now.
    fn step(&mut self, i: usize, t: Instant) {
        if let Some(e) = (self.clock.of_step.get(i)).and_then(|&k| self.per_kind.get_mut(k)) {
            e.0 += 1;
            e.1 = e.1.saturating_add(nanos_since(t));
        }
    }

    /// Adds the run's totals and the whole run to `telemetry::step_times`.
    fn finish(self) {
        let whole = (step_times::FUSED_RUN, 1, nanos_since(self.start));
        let kinds = self.clock.kinds.iter().zip(&self.per_kind);
        step_times::add(
            kinds
                .map(|(k, &(n, ns))| (k.as_str(), n, ns))
                .chain([whole]),
        );
    }
}

/// `OrtNodeComputeInfo` first, so ORT's pointer is a pointer to this.
#[repr(C)]
struct FusedShell {
    base: OrtNodeComputeInfo,
    plan: Plan,
}

/// What a partition read from a context file brings besides its nodes
/// (`ep::context::file::LoadedPartition`); empty for a partition compiled from ORT's subgraph.
#[derive(Default)]
struct Restored {
    /// Per node index: the inputs the kernel's import covers, and the import.
    imports: HashMap<usize, (Vec<usize>, PackedImport)>,
    /// (gather node, MatMulNBits node) pairs whose table is the weight's codes.
    tied: Vec<(usize, usize)>,
    /// The mapped context file: the constants kernels read are views of it, not copies.
    map: Option<Arc<FileMap>>,
}

/// Builds the plan of one fused partition from its nodes (`ep::spec`); `outer_in` /
/// `outer_out` name the fused node's inputs and outputs in ORT's order. `imports` (a partition
/// read from a context file, `ep::context`): per node index, the inputs its kernel's import
/// covers and the import; those inputs are not offered for prepacking (the file may not hold
/// their bytes) and the kernel must accept the import; likewise the data of a tied table.
fn build(
    spec: &PartitionSpec<'_>,
    outer_in: &[Option<String>],
    outer_out: &[Option<String>],
    env: &Arc<KernelEnv>,
    restored: Restored,
) -> Result<Plan> {
    let Restored {
        mut imports,
        tied,
        map,
    } = restored;
    let nodes = &spec.nodes;
    // The fused node's inputs and outputs, by value name (ORT passes them in this order).
    let mut outer_in_of: HashMap<&str, usize> = HashMap::new();
    for (k, v) in outer_in.iter().enumerate() {
        if let Some(v) = v {
            outer_in_of.entry(v).or_insert(k);
        }
    }
    let mut outer_out_of: HashMap<&str, usize> = HashMap::new();
    for (k, v) in outer_out.iter().enumerate() {
        if let Some(v) = v {
            outer_out_of.insert(v, k);
        }
    }
    // Each node's op and value names: the order and the patterns use them.
    let names = |vs: &[Option<ValueSpec<'_>>]| -> Vec<Option<String>> {
        vs.iter()
            .map(|v| v.as_ref().map(|v| v.name.clone()))
            .collect()
    };
    let descs: Vec<NodeDesc> = nodes
        .iter()
        .map(|n| NodeDesc {
            op: n.op.clone(),
            domain: n.domain.clone(),
            inputs: names(&n.inputs),
            outputs: names(&n.outputs),
        })
        .collect();
    // A topological order of the subgraph (ORT's node order is not relied on).
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, d) in descs.iter().enumerate() {
        for v in d.outputs.iter().flatten() {
            producer.insert(v, i);
        }
    }
    let preds: Vec<Vec<usize>> = descs
        .iter()
        .map(|d| {
            d.inputs
                .iter()
                .flatten()
                .filter_map(|v| producer.get(v.as_str()).copied())
                .collect()
        })
        .collect();
    let order = crate::ep::partition::order(&preds, &vec![true; nodes.len()])
        .ok_or_else(|| Error::fail("the fused subgraph has a cycle"))?;
    // Nodes that may combine into one step (`ep::fusion`) are made adjacent.
    let outer_names = outer_out_of.keys().map(|k| k.to_string()).collect();
    let swiglus = find_swiglus(&descs, &outer_names);
    let order = gather(&order, &swiglus);
    // A MatMulNBits whose output only an Add of a bias reads takes the bias (`fold_bias`); the
    // Add then has no step. `stepped`: the nodes that got a step, in step order.
    let bias_adds: HashMap<usize, BiasAdd> = find_bias_adds(&descs, &outer_names)
        .into_iter()
        .map(|b| (b.nbits, b))
        .collect();
    let mut folded = HashSet::new();
    let mut stepped = Vec::with_capacity(order.len());

    let mut slots = Slots {
        src: Vec::new(),
        names: Vec::new(),
        consts: Vec::new(),
    };
    let mut slot_of: HashMap<String, usize> = HashMap::new();
    // Per constant: the (step, input) pairs of the kernels that still read it (did not prepack it).
    let mut const_readers: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut const_src: Vec<&ValueSpec<'_>> = Vec::new();
    let mut steps = Vec::with_capacity(order.len());
    for &ni in &order {
        if folded.contains(&ni) {
            continue;
        }
        stepped.push(ni);
        let node = &nodes[ni];
        let label = node.label();
        let def = find_def(&node.domain, &node.op, node.since).ok_or_else(|| {
            Error::fail(format!(
                "{label}: no rcpu kernel for {}:{} opset {}",
                node.domain, node.op, node.since
            ))
        })?;
        let mut kernel =
            (def.create)(&KernelInfo::from_spec(node), env).map_err(|e| e.context(&label))?;
        // The value output 0 is written as: the Add's output when its bias folds in.
        let mut out0 = None;
        if let Some(b) = bias_adds.get(&ni) {
            let add = &nodes[b.add];
            if let Some(bias) = add.inputs.get(b.bias_input).and_then(Option::as_ref) {
                if let Some(t) = vector_constant(bias) {
                    if fold_bias(kernel.as_mut(), t.data::<f32>()?)
                        .map_err(|e| e.context(&label))?
                    {
                        folded.insert(b.add);
                        out0 = add.outputs.first().and_then(Option::as_ref);
                    }
                }
            }
        }
        // A packed weight read from a context file replaces the prepacking of what it covers;
        // a table tied to a packed weight is read from it (`share_tied_tables`).
        let mut covered = match imports.remove(&ni) {
            Some((covers, imp)) => {
                if !kernel.import_packed(imp).map_err(|e| e.context(&label))? {
                    return Err(Error::fail(format!(
                        "{label}: the kernel did not take the packed weight of the context file"
                    )));
                }
                covers
            }
            None => Vec::new(),
        };
        if tied.iter().any(|&(g, _)| g == ni) {
            covered.push(0);
        }
        let mut inputs = Vec::new();
        for (i, v) in node.inputs.iter().enumerate() {
            let Some(v) = v else {
                inputs.push(None);
                continue;
            };
            let s = match slot_of.get(&v.name) {
                Some(&s) => s,
                None => {
                    let src = if let Some(&k) = outer_in_of.get(v.name.as_str()) {
                        SlotSrc::Outer(k)
                    } else if v.is_constant() {
                        const_readers.push(Vec::new());
                        const_src.push(v);
                        SlotSrc::Const(const_readers.len() - 1)
                    } else {
                        return Err(Error::fail(format!(
                            "{label}: input {i} ('{}') is neither an input of the fused \
                             node, a constant nor an earlier node's output",
                            v.name
                        )));
                    };
                    slots.src.push(src);
                    slots.names.push(v.name.clone());
                    slot_of.insert(v.name.clone(), slots.src.len() - 1);
                    slots.src.len() - 1
                }
            };
            if let SlotSrc::Const(k) = slots.src[s] {
                if !covered.contains(&i) {
                    // Offered for prepacking as ORT offers a constant input on the per-node path.
                    let t = const_src[k].constant_value().ok_or_else(|| {
                        Error::fail(format!("{label}: constant input {i} has no value"))
                    })?;
                    let packed = kernel.prepack(i, &t).map_err(|e| e.context(&label))?;
                    if packed {
                        page_out(&t);
                    } else {
                        const_readers[k].push((steps.len(), i));
                    }
                }
            }
            inputs.push(Some(s));
        }
        let mut outputs = Vec::new();
        for (i, v) in node.outputs.iter().enumerate() {
            let v = if i == 0 {
                out0.or(v.as_ref())
            } else {
                v.as_ref()
            };
            let Some(v) = v else {
                outputs.push(None);
                continue;
            };
            if slot_of.contains_key(&v.name) {
                return Err(Error::fail(format!(
                    "{label}: output {i} ('{}') is written twice",
                    v.name
                )));
            }
            let elem =
                v.ty.as_ref()
                    .ok_or_else(|| {
                        Error::fail(format!(
                            "{label}: output {i} ('{}') is not a typed tensor",
                            v.name
                        ))
                    })?
                    .elem;
            slots.src.push(SlotSrc::Inner {
                elem,
                outer: outer_out_of.get(v.name.as_str()).copied(),
            });
            slots.names.push(v.name.clone());
            slot_of.insert(v.name.clone(), slots.src.len() - 1);
            outputs.push(Some(slots.src.len() - 1));
        }
        steps.push(Step {
            run: StepRun::Node(kernel),
            node: Some(ni),
            label,
            kind: node.op.clone(),
            wiring: Wiring {
                inputs,
                outputs,
                release: Vec::new(),
            },
        });
    }
    if let Some(ni) = imports.keys().next() {
        return Err(Error::fail(format!(
            "the context file holds a packed weight for node {ni}, which has no step"
        )));
    }
    let tied = share_tied_tables(&mut steps, &slots, &const_src, &mut const_readers, &tied)?;
    // rcpu's copies of the constants some kernel still reads.
    for (k, v) in const_src.iter().enumerate() {
        let (elem, shape_src) = v
            .constant_layout()
            .ok_or_else(|| Error::fail("constant has no layout"))?;
        let name = v.name.clone();
        let data = if !const_readers[k].is_empty() {
            let t = v.constant_value().ok_or_else(|| {
                Error::fail(format!(
                    "constant '{name}' is read by a kernel but has no value"
                ))
            })?;
            let bytes = t
                .all_bytes()
                .map_err(|e| e.context(format!("constant '{name}'")))?;
            match map.as_ref().and_then(|m| view_of(m, bytes)) {
                Some(view) => Some(ConstantBytes::Mapped(view)),
                None => Some(ConstantBytes::Copy(ConstantCopy::try_copy(bytes).map_err(
                    |e| {
                        Error::fail(format!(
                            "cannot copy constant '{name}' ({} bytes): {e}",
                            bytes.len()
                        ))
                    },
                )?)),
            }
        } else {
            None
        };
        let mut shape = Vec::new();
        shape
            .try_reserve(shape_src.len())
            .map_err(|_| Error::fail("cannot allocate a shape"))?;
        shape.extend_from_slice(&shape_src);
        slots.consts.push(OwnedConst {
            name,
            elem,
            shape,
            data,
        });
    }
    // Every constant is packed or copied by now: the pages the packing and copying read leave
    // memory (`page_out`), but for those of the mapped context file the plan reads in place.
    for (v, c) in const_src.iter().zip(&slots.consts) {
        if let (Some(t), false) = (
            v.constant_value(),
            c.data.as_ref().is_some_and(ConstantBytes::is_mapped),
        ) {
            page_out(&t);
        }
    }
    let mut steps = combine_swiglus(steps, &stepped, &swiglus, env);
    // Each inner value's buffer returns to the pool after its last reader (or its producer,
    // when nothing in the partition reads it).
    let mut last = vec![None; slots.src.len()];
    for (si, st) in steps.iter().enumerate() {
        for s in st.touched() {
            last[s] = Some(si);
        }
    }
    for (s, l) in last.iter().enumerate() {
        if let (Some(si), SlotSrc::Inner { outer: None, .. }) = (l, slots.src[s]) {
            steps[*si].wiring.release.push(s);
        }
    }
    let clock = env.step_times.then(|| StepClock::new(&steps));
    Ok(Plan {
        steps,
        slots,
        frames: Mutex::new(Vec::new()),
        clock,
        tied,
        context: None,
    })
}

/// Lets the kernel reclaim the pages of a constant rcpu has packed or copied
/// (`os::advise_page_out`, which never changes what they hold): ORT maps a model's external
/// initializers from its file and releases them only once session creation ends, so without
/// this every page packing read stays resident beside the packed copy until then, and the
/// creation peak holds the weights twice.
fn page_out(t: &Tensor<'_>) {
    if let Ok(b) = t.all_bytes() {
        let _ = crate::os::advise_page_out(b);
    }
}

/// A view of `bytes` in `map` when they lie in it (a constant of a context file's section:
/// page-aligned, so the 64-byte alignment a frame's constants keep holds).
fn view_of(map: &Arc<FileMap>, bytes: &[u8]) -> Option<FileSlice<u8>> {
    let off = (bytes.as_ptr() as usize).checked_sub(map.addr())?;
    FileSlice::new(map, off, bytes.len())
}

/// `v`'s value when it is a constant float32 vector (one dimension): a bias an Add may fold into
/// the MatMulNBits before it.
fn vector_constant<'a>(v: &ValueSpec<'a>) -> Option<Tensor<'a>> {
    v.constant_value().filter(|t| {
        t.elem() == ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT && t.shape().len() == 1
    })
}

/// A tied embedding (`gather_block_quantized::share_tied_codes`): each GatherBlockQuantized whose
/// constant data are the very codes of a packed MatMulNBits weight in this partition reads them
/// from that weight, and stops being a reader of its data (no copy is kept when it was the last).
/// `known` (a partition read from a context file): the (gather node, MatMulNBits node) pairs its
/// writer found tied, shared without comparing bytes the file need not hold; every one must
/// share. Returns the pairs shared, as node indices.
fn share_tied_tables(
    steps: &mut [Step],
    slots: &Slots,
    const_src: &[&ValueSpec<'_>],
    const_readers: &mut [Vec<(usize, usize)>],
    known: &[(usize, usize)],
) -> Result<Vec<(usize, usize)>> {
    let const_of = |st: &Step, i: usize| match st.wiring.inputs.get(i) {
        Some(&Some(s)) => match slots.src[s] {
            SlotSrc::Const(k) => Some(k),
            _ => None,
        },
        _ => None,
    };
    // Packed MatMulNBits weights (4- or 8-bit) with a constant B: (codes, B's constant, node).
    let packed: Vec<_> = steps
        .iter()
        .filter_map(|st| match &st.run {
            StepRun::Node(k) => Some((packed_codes(k.as_ref())?, const_of(st, 1)?, st.node?)),
            StepRun::SwiGlu(_) => None,
        })
        .collect();
    let mut shared = Vec::new();
    for (si, st) in steps.iter_mut().enumerate() {
        let Some(kd) = const_of(st, 0) else {
            continue;
        };
        let node = st.node;
        if st.kind != "GatherBlockQuantized" {
            continue;
        }
        let StepRun::Node(kernel) = &mut st.run else {
            continue;
        };
        if let Some(&(g, m)) = known.iter().find(|(g, _)| Some(*g) == node) {
            let weight = packed.iter().find(|p| p.2 == m).map(|p| &p.0);
            let layout = const_src[kd].constant_layout();
            let ok = match (weight, layout) {
                (Some(w), Some((elem, shape))) => {
                    share_known_tied_codes(kernel.as_mut(), elem, &shape, w)
                }
                _ => false,
            };
            if !ok {
                return Err(Error::fail(format!(
                    "{}: the context file ties its table to node {m}, which holds no packed \
                     weight of its shape",
                    st.label
                )));
            }
            const_readers[kd].retain(|&r| r != (si, 0));
            shared.push((g, m));
            continue;
        }
        if !const_readers[kd].contains(&(si, 0)) {
            continue;
        }
        let Some(data) = const_src[kd].constant_value() else {
            continue;
        };
        for (weight, kb, m) in &packed {
            let Some(b) = const_src[*kb].constant_value() else {
                continue;
            };
            if share_tied_codes(kernel.as_mut(), &data, weight, &b)? {
                const_readers[kd].retain(|&r| r != (si, 0));
                if let Some(g) = node {
                    shared.push((g, *m));
                }
                break;
            }
        }
    }
    if let Some((g, _)) = known.iter().find(|k| !shared.contains(k)) {
        return Err(Error::fail(format!(
            "the context file ties the table of node {g}, which is no GatherBlockQuantized step"
        )));
    }
    Ok(shared)
}

/// Replaces the steps of each SwiGLU match (adjacent in `order` after `gather`) by one
/// combined step when its two MatMulNBits kernels can pair (`SwiGlu::new`); the others stay as
/// they are.
fn combine_swiglus(
    steps: Vec<Step>,
    order: &[usize],
    matches: &[crate::ep::fusion::SwiGluMatch],
    env: &Arc<KernelEnv>,
) -> Vec<Step> {
    let starts: HashMap<usize, &crate::ep::fusion::SwiGluMatch> =
        matches.iter().map(|m| (m[0], m)).collect();
    let mut out = Vec::with_capacity(steps.len());
    let mut it = steps.into_iter().zip(order).peekable();
    while let Some((st, &ni)) = it.next() {
        let Some(m) = starts.get(&ni) else {
            out.push(st);
            continue;
        };
        // `gather` put the match's nodes here in match order.
        let mut parts = vec![st];
        for &want in &m[1..] {
            match it.next_if(|(_, &n)| n == want) {
                Some((p, _)) => parts.push(p),
                None => break,
            }
        }
        let fast = match (&parts[..], parts.len()) {
            ([g, u, ..], 5) => match (&g.run, &u.run) {
                (StepRun::Node(gk), StepRun::Node(uk)) => SwiGlu::new(&**gk, &**uk, env),
                _ => None,
            },
            _ => None,
        };
        let Some(fast) = fast else {
            out.extend(parts);
            continue;
        };
        let wiring = Wiring {
            inputs: vec![parts[0].wiring.inputs.first().copied().flatten()],
            outputs: vec![parts[4].wiring.outputs.first().copied().flatten()],
            release: Vec::new(),
        };
        let label = format!("SwiGLU MLP ({} and {})", parts[0].label, parts[1].label);
        out.push(Step {
            run: StepRun::SwiGlu(Box::new(SwiGluStep { fast, parts })),
            node: None,
            label,
            kind: "SwiGLU MLP".to_string(),
            wiring,
        });
    }
    out
}

impl Plan {
    /// What the plan's kernels export of their packed weights, by node index (`ep::context`).
    fn exports(&self) -> Vec<(usize, PackedExport<'_>)> {
        fn walk<'p>(steps: &'p [Step], out: &mut Vec<(usize, PackedExport<'p>)>) {
            for st in steps {
                match &st.run {
                    StepRun::Node(k) => {
                        if let (Some(n), Some(x)) = (st.node, k.export_packed()) {
                            out.push((n, x));
                        }
                    }
                    StepRun::SwiGlu(c) => walk(&c.parts, out),
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.steps, &mut out);
        out
    }

    /// One run over `outer`, the fused node's context.
    fn run(&self, outer: &KernelContext<'_>) -> Result<()> {
        let mut tally = self.clock.as_ref().map(RunTally::start);
        let taken = self.frames.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut frame = match taken {
            Some(f) => f,
            None => Frame::new(self.slots.src.len(), memory::scratch_governor().into())?,
        };
        let r = self.steps_over(&mut frame, outer, tally.as_mut());
        frame.reset();
        self.frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(frame);
        if let Some(t) = tally {
            t.finish();
        }
        r
    }

    fn steps_over(
        &self,
        frame: &mut Frame,
        outer: &KernelContext<'_>,
        mut tally: Option<&mut RunTally<'_>>,
    ) -> Result<()> {
        for (i, st) in self.steps.iter().enumerate() {
            let t = tally.is_some().then(Instant::now);
            let r = match self.view(st, frame, outer) {
                Ok(true) => Ok(()),
                Ok(false) => self.step(st, frame, outer),
                Err(e) => Err(e),
            };
            if let (Some(tally), Some(t)) = (tally.as_deref_mut(), t) {
                tally.step(i, t);
            }
            r?;
            for &s in &st.wiring.release {
                frame.release(s);
            }
        }
        Ok(())
    }

    /// A view step (`OpKernel::view_dims`) done by handing its input's buffer to its output:
    /// `Ok(true)` when done, `Ok(false)` when the step must run (not a view, or a value the frame
    /// does not own both ends of, or one a later step still reads).
    fn view(&self, st: &Step, frame: &mut Frame, outer: &KernelContext<'_>) -> Result<bool> {
        let StepRun::Node(k) = &st.run else {
            return Ok(false);
        };
        if !k.is_view() {
            return Ok(false);
        }
        let w = &st.wiring;
        let (Some(&Some(from)), [Some(to)]) = (w.inputs.first(), w.outputs.as_slice()) else {
            return Ok(false);
        };
        let owned = |s: usize| match self.slots.src.get(s) {
            Some(&SlotSrc::Inner { elem, outer: None }) => Some(elem),
            _ => None,
        };
        if !w.release.contains(&from)
            || owned(from).is_none()
            || owned(from) != owned(*to)
            || !frame.can_hand_over(from, *to)
        {
            return Ok(false);
        }
        let dims = match self.in_node(st, frame, outer, |ctx| k.view_dims(ctx))? {
            None => return Ok(false),
            Some(d) => d.map_err(|e| e.context(&st.label))?,
        };
        frame
            .hand_over(from, *to, &dims)
            .map_err(|e| e.context(&st.label))?;
        Ok(true)
    }

    /// Runs one step (a combined one: its own path, or its parts when that declines).
    fn step(&self, st: &Step, frame: &Frame, outer: &KernelContext<'_>) -> Result<()> {
        let r = self.in_node(st, frame, outer, |ctx| match &st.run {
            StepRun::Node(k) => k.compute(ctx).map(|()| true),
            StepRun::SwiGlu(c) => c.fast.try_run(ctx),
        })?;
        match r {
            Ok(true) => Ok(()),
            Ok(false) => match &st.run {
                StepRun::SwiGlu(c) => c.parts.iter().try_for_each(|p| self.step(p, frame, outer)),
                StepRun::Node(_) => Ok(()),
            },
            Err(e) => Err(e.context(&st.label)),
        }
    }

    /// Calls `f` with step `st`'s view of the frame as its kernel context, the lanes count
    /// started afresh (the ledger records the lanes this node's dispatches used), a panic caught
    /// and answered as an error naming the step.
    fn in_node<T>(
        &self,
        st: &Step,
        frame: &Frame,
        outer: &KernelContext<'_>,
        f: impl FnOnce(&KernelContext<'_>) -> T,
    ) -> Result<T> {
        let nf = NodeFrame {
            frame,
            slots: &self.slots,
            wiring: &st.wiring,
            outer,
        };
        let ctx = KernelContext::from_frame(&nf);
        crate::runtime::par::take_lanes_used();
        catch_unwind(AssertUnwindSafe(|| f(&ctx))).map_err(|p| {
            Error::ep_fail(format!(
                "{}: rcpu: internal panic in Compute: {}",
                st.label,
                super::status::panic_message(&*p)
            ))
        })
    }
}

unsafe extern "C" fn create_state(
    this: *mut OrtNodeComputeInfo,
    _ctx: *mut OrtNodeComputeContext,
    state: *mut *mut c_void,
) -> StatusPtr {
    guard("NodeComputeInfo::CreateState", || {
        if state.is_null() {
            return Err(Error::invalid_argument("CreateState: NULL out"));
        }
        // SAFETY: non-NULL out-pointer. The plan is the state: runs share it (frames per run).
        unsafe { *state = this as *mut c_void };
        Ok(())
    })
}

unsafe extern "C" fn compute(
    this: *mut OrtNodeComputeInfo,
    _state: *mut c_void,
    ctx: *mut OrtKernelContext,
) -> StatusPtr {
    guard("fused Compute", || {
        if this.is_null() || ctx.is_null() {
            return Err(Error::invalid_argument("fused Compute: NULL argument"));
        }
        // SAFETY: `this` is a FusedShell made by `compile`, alive until ReleaseNodeComputeInfos,
        // which ORT does not call during a run; only shared access (runs may be concurrent).
        let shell = unsafe { &*(this as *const FusedShell) };
        // SAFETY: ctx is the live context of this call; the scope ends before we return.
        let _scope = unsafe { super::ort_pool::ComputeScope::enter(ctx) };
        let staging = Staging::new();
        // SAFETY: as above.
        let outer = unsafe { KernelContext::new(ctx, &staging) };
        shell.plan.run(&outer)?;
        staging.write_back();
        Ok(())
    })
}

unsafe extern "C" fn release_state(_this: *mut OrtNodeComputeInfo, _state: *mut c_void) {
    // The state is the plan itself, released with the compute info: nothing to do.
    guard_value("NodeComputeInfo::ReleaseState", (), || ());
}

/// What `Compile` needs of its EP: the kernels' environment and the session's EPContext options.
pub(crate) struct CompileEnv<'e> {
    pub env: &'e Arc<KernelEnv>,
    pub context: &'e ContextOptions,
    /// Context files the session has written so far (`ep::context::file_name_for`).
    pub context_files: &'e std::sync::atomic::AtomicUsize,
}

/// The value names of `vs` (`None` for an omitted one).
fn value_names(vs: Vec<Option<ValueInfo<'_>>>) -> Result<Vec<Option<String>>> {
    vs.into_iter()
        .map(|v| v.map(|v| v.name()).transpose())
        .collect()
}

/// `OrtEp::Compile` for rcpu's EP: one compute info per fused node; with `ep.context_enable`,
/// a context file and one `EPContext` node per fused node (`ep::context`).
///
/// # Safety
/// The arguments are ORT's for this call: `count` graphs and fused nodes, output arrays of
/// `count` entries (`ctx_nodes` may be NULL when no context model is asked for), all valid
/// during the call.
pub(crate) unsafe fn compile(
    ce: &CompileEnv<'_>,
    graphs: *const *const OrtGraph,
    fused_nodes: *const *const OrtNode,
    count: usize,
    infos: *mut *mut OrtNodeComputeInfo,
    ctx_nodes: *mut *mut OrtNode,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    if graphs.is_null() || fused_nodes.is_null() || infos.is_null() {
        return Err(Error::invalid_argument("Compile: NULL argument"));
    }
    if ce.context.enable && ctx_nodes.is_null() {
        return Err(Error::invalid_argument(
            "Compile: a context model was asked for but ORT passed no EPContext node array",
        ));
    }
    // SAFETY: ORT passes arrays of `count` entries, valid for the call.
    let (gs, fs, outs) = unsafe {
        (
            std::slice::from_raw_parts(graphs, count),
            std::slice::from_raw_parts(fused_nodes, count),
            std::slice::from_raw_parts_mut(infos, count),
        )
    };
    outs.iter_mut().for_each(|o| *o = std::ptr::null_mut());
    let mut made: Vec<Box<FusedShell>> = Vec::with_capacity(count);
    // The partitions compiled from ORT's subgraphs, kept for the context file.
    let mut specs: Vec<(String, PartitionSpec<'_>)> = Vec::new();
    for (&g, &f) in gs.iter().zip(fs) {
        // SAFETY: graph and fused node valid during Compile.
        let (graph, fused) = unsafe { (Graph::new(g), Node::from_raw(f)) };
        let fused_name = fused.name().unwrap_or_default();
        let outer_in = value_names(fused.inputs()?)?;
        let outer_out = value_names(fused.outputs()?)?;
        let loaded = super::ep_context::context_of(&graph, ce.env)
            .map_err(|e| e.context(format!("fused node '{fused_name}'")))?;
        let plan = match loaded {
            Some((file, part_name)) => {
                if ce.context.enable {
                    return Err(Error::invalid_argument(format!(
                        "fused node '{fused_name}': the model already is a context model \
                         (EPContext nodes); create it with {}=0",
                        crate::ep::context::KEY_ENABLE
                    )));
                }
                let part = file
                    .partition(&part_name)
                    .map_err(|e| e.context(format!("fused node '{fused_name}'")))?;
                let restored = Restored {
                    imports: part.imports,
                    tied: part.tied,
                    map: Some(Arc::clone(file.map())),
                };
                let mut plan = build(&part.spec, &outer_in, &outer_out, ce.env, restored)
                    .map_err(|e| e.context(format!("fused node '{fused_name}'")))?;
                plan.context = Some(Arc::clone(&file));
                plan
            }
            None => {
                let spec = PartitionSpec::from_graph(&graph)?;
                let plan = build(&spec, &outer_in, &outer_out, ce.env, Restored::default())
                    .map_err(|e| e.context(format!("fused node '{fused_name}'")))?;
                if ce.context.enable {
                    specs.push((fused_name, spec));
                }
                plan
            }
        };
        made.push(Box::new(FusedShell {
            base: OrtNodeComputeInfo {
                ort_version_supported: EP_ABI_VERSION,
                create_state: Some(create_state),
                compute: Some(compute),
                release_state: Some(release_state),
            },
            plan,
        }));
    }
    if ce.context.enable {
        // SAFETY: ctx_nodes has `count` entries (checked non-NULL above), valid for the call.
        let ctx_out = unsafe { std::slice::from_raw_parts_mut(ctx_nodes, count) };
        let parts: Vec<PartitionOut<'_>> = specs
            .iter()
            .zip(&made)
            .map(|((name, spec), shell)| PartitionOut {
                name: name.clone(),
                spec,
                exports: shell.plan.exports(),
                tied: shell.plan.tied.clone(),
            })
            .collect();
        // SAFETY: the graphs are valid during Compile.
        let first = unsafe { Graph::new(gs[0]) };
        super::ep_context::write_context(&first, fs, ce, &parts, ctx_out)?;
    }
    for (o, p) in outs.iter_mut().zip(made) {
        *o = Box::into_raw(p) as *mut OrtNodeComputeInfo;
    }
    Ok(())
}

/// `OrtEp::ReleaseNodeComputeInfos`.
///
/// # Safety
/// `infos` holds `n` pointers made by [`compile`] (or NULL), each released once.
pub(crate) unsafe fn release(infos: *mut *mut OrtNodeComputeInfo, n: usize) {
    guard_value("ReleaseNodeComputeInfos", (), || {
        if infos.is_null() {
            return;
        }
        // SAFETY: ORT passes `n` entries.
        let all = unsafe { std::slice::from_raw_parts(infos, n) };
        for &p in all {
            if !p.is_null() {
                // SAFETY: made by Box::into_raw in compile; ORT releases each once.
                drop(unsafe { Box::from_raw(p as *mut FusedShell) });
            }
        }
    })
}
