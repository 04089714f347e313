//! Weights and how they are held: f32, or a checkpoint's 16-bit floats widened as they are used.

use std::collections::HashMap;

use candle_core::{DType, Storage, Tensor};

use super::error::{EngineError, Result};
use super::quant::Quantized;

/// A tensor's values as a flat row-major `f32` vector.
fn values(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    let t = t.to_dtype(DType::F32)?.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(cpu), Some((start, end))) => Ok(cpu.as_slice::<f32>()?[start..end].to_vec()),
        _ => Err(candle_core::Error::Msg("expected a contiguous CPU tensor".into())),
    }
}

/// Canonical tensors by name, taken out as they are loaded, and how the network keeps them; or,
/// in a plan ([`Weights::plan`]), no tensors at all: the loader runs over the description alone
/// and every tensor it asks for is written down ([`super::expected_tensors`]), so the list of a
/// family's tensors and what the network loads are one code and cannot disagree.
pub struct Weights {
    tensors: HashMap<String, Tensor>,
    /// 2-D tensors kept in a GGUF file's blocks, by canonical name, with [`WeightStorage::Stored`].
    quantized: HashMap<String, Quantized>,
    storage: WeightStorage,
    /// What a plan has been asked for, in order: `(name, shape, required)`.
    plan: Option<Vec<Expected>>,
}

/// A tensor a description implies: its canonical name, its shape, and whether the network
/// needs it (optional ones are read when present: a DeBERTa `pos_q` bias, a separate `lm_head`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Canonical name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Whether loading fails without it.
    pub required: bool,
}

/// How a network holds its linear layers' weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightStorage {
    /// Widened to f32 once, at load.
    F32,
    /// In the checkpoint's precision when that is f16 or bf16 (half the memory of f32), or in a
    /// GGUF file's quantised blocks (`Q4_0` … `Q8_0`, `Q4_K`, `Q5_K`, `Q6_K`: about the file's size), each
    /// panel widened to f32 as a product needs it, into a buffer of the thread's. The widening
    /// is exact (a quantised block widens as Candle dequantises it), so the products — and the
    /// attention — are bit for bit those of [`Self::F32`]; and it costs nothing measurable
    /// (short inputs are faster: fewer bytes to stream).
    #[default]
    Stored,
}

impl WeightStorage {
    /// The app's and command line's choice: [`Self::Stored`], or what `ATTNVIZ_WEIGHTS=f32|stored`
    /// says (to compare the two).
    pub fn from_env() -> Self {
        match std::env::var("ATTNVIZ_WEIGHTS").ok().as_deref().map(str::trim) {
            Some("f32") => Self::F32,
            _ => Self::Stored,
        }
    }
}

/// Weights as the network keeps them: f32, or the checkpoint's 16-bit floats, widened to f32 a
/// piece at a time as they are used ([`WeightStorage::Stored`]): a linear layer's panels, the
/// token embeddings, `lm_head`.
#[derive(Debug, Clone)]
pub(super) enum Values {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
    Bf16(Vec<half::bf16>),
    /// GGUF blocks, row by row.
    Quant(Quantized),
}

impl Values {
    pub(super) fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F16(v) => v.len(),
            Self::Bf16(v) => v.len(),
            Self::Quant(q) => q.rows() * q.cols(),
        }
    }

    /// Bytes as held.
    pub(super) fn bytes(&self) -> usize {
        match self {
            Self::F32(v) => v.len() * 4,
            Self::F16(v) => v.len() * 2,
            Self::Bf16(v) => v.len() * 2,
            Self::Quant(q) => q.bytes(),
        }
    }

    /// Values `range` as f32 into `out` (exactly: every f16 and bf16 is an f32).
    pub(super) fn widen_into(&self, range: std::ops::Range<usize>, out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        match self {
            Self::F32(v) => out.copy_from_slice(&v[range]),
            Self::F16(v) => v[range].convert_to_f32_slice(out),
            Self::Bf16(v) => v[range].convert_to_f32_slice(out),
            Self::Quant(q) => q.widen_into(range, out),
        }
    }

    /// `parts` side by side (the fused q/k/v, gate/up): in their precision when they share it.
    pub(super) fn concat(parts: Vec<Self>) -> Self {
        let total = parts.iter().map(Self::len).sum();
        if parts.iter().all(|p| matches!(p, Self::F16(_))) {
            return Self::F16(
                parts.into_iter().flat_map(|p| if let Self::F16(v) = p { v } else { Vec::new() }).collect(),
            );
        }
        if parts.iter().all(|p| matches!(p, Self::Bf16(_))) {
            return Self::Bf16(
                parts.into_iter().flat_map(|p| if let Self::Bf16(v) = p { v } else { Vec::new() }).collect(),
            );
        }
        if let Some(cols) = parts.iter().find_map(|p| if let Self::Quant(q) = p { Some(q.cols()) } else { None }) {
            // Stored blocks stay blocks; a part in floats joins them as rows of f32.
            let stacked = parts
                .into_iter()
                .map(|p| match p {
                    Self::Quant(q) => q,
                    other => {
                        let mut v = vec![0.0; other.len()];
                        other.widen_into(0..v.len(), &mut v);
                        Quantized::from_f32(&v, cols)
                    }
                })
                .collect();
            return Self::Quant(Quantized::stack(stacked));
        }
        let mut out = Vec::with_capacity(total);
        for p in parts {
            match p {
                Self::F32(v) => out.extend(v),
                Self::F16(v) => out.extend(v.iter().map(|x| x.to_f32())),
                Self::Bf16(v) => out.extend(v.iter().map(|x| x.to_f32())),
                Self::Quant(q) => {
                    let start = out.len();
                    out.resize(start + q.rows() * q.cols(), 0.0);
                    q.widen_into(0..q.rows() * q.cols(), &mut out[start..]);
                }
            }
        }
        Self::F32(out)
    }
}

impl Weights {
    /// The canonical tensors of a model, held as `storage` says.
    pub fn new(tensors: HashMap<String, Tensor>, storage: WeightStorage) -> Self {
        Self { tensors, quantized: HashMap::new(), storage, plan: None }
    }

    /// [`Self::new`] with matrices kept in a GGUF file's blocks (by canonical name; a name is in
    /// one map or the other), held with [`WeightStorage::Stored`].
    pub fn with_quantized(tensors: HashMap<String, Tensor>, quantized: HashMap<String, Quantized>) -> Self {
        Self { tensors, quantized, storage: WeightStorage::Stored, plan: None }
    }

    /// No tensors: a load over this only writes down what it asks for (every value it gets is
    /// empty, and nothing of the size of a weight is allocated).
    pub(super) fn plan() -> Self {
        Self { tensors: HashMap::new(), quantized: HashMap::new(), storage: WeightStorage::F32, plan: Some(Vec::new()) }
    }

    /// Whether this is a plan (the loader skips computing from values it did not get).
    pub(super) fn planning(&self) -> bool {
        self.plan.is_some()
    }

    /// What a plan was asked for, each tensor once.
    pub(super) fn into_plan(self) -> Vec<Expected> {
        self.plan.unwrap_or_default()
    }

    /// In a plan, writes `name` down and says so.
    fn noted(&mut self, name: &str, shape: &[usize], required: bool) -> bool {
        let Some(plan) = &mut self.plan else { return false };
        if !plan.iter().any(|e| e.name == name) {
            plan.push(Expected { name: name.to_string(), shape: shape.to_vec(), required });
        }
        true
    }

    /// The values of `name` (which must have `shape`) as the network keeps a large weight (a
    /// linear layer's, the token embeddings, `lm_head`): in its 16-bit precision with
    /// [`WeightStorage::Stored`], else f32. Taken out.
    pub(super) fn take_values(&mut self, name: &str, shape: &[usize]) -> Result<Values> {
        if self.noted(name, shape, true) {
            return Ok(Values::F32(Vec::new()));
        }
        if let Some(q) = self.quantized.remove(name) {
            check_shape(name, &[q.rows(), q.cols()], shape)?;
            return Ok(Values::Quant(q));
        }
        let t = self.checked(name, shape)?;
        let stored = self.storage == WeightStorage::Stored;
        let values = match t.dtype() {
            DType::F16 if stored => Values::F16(t.contiguous()?.flatten_all()?.to_vec1::<half::f16>()?),
            DType::BF16 if stored => Values::Bf16(t.contiguous()?.flatten_all()?.to_vec1::<half::bf16>()?),
            _ => Values::F32(values(t)?),
        };
        self.tensors.remove(name);
        Ok(values)
    }

    /// The values of `name`, which must have `shape`, taken out of the set (each tensor is read
    /// once; dropping it as it is converted keeps one copy of the weights in memory, not two).
    pub(super) fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let v = self.values(name, shape)?;
        self.tensors.remove(name);
        self.quantized.remove(name);
        Ok(v)
    }

    fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name) || self.quantized.contains_key(name)
    }

    /// [`Self::take`] for a tensor the network reads when the checkpoint has it.
    pub(super) fn take_optional(&mut self, name: &str, shape: &[usize]) -> Result<Option<Vec<f32>>> {
        if self.noted(name, shape, false) {
            return Ok(Some(Vec::new()));
        }
        if !self.contains(name) {
            return Ok(None);
        }
        self.take(name, shape).map(Some)
    }

    /// [`Self::take_values`] for a tensor the network reads when the checkpoint has it.
    pub(super) fn take_optional_values(&mut self, name: &str, shape: &[usize]) -> Result<Option<Values>> {
        if self.noted(name, shape, false) {
            return Ok(Some(Values::F32(Vec::new())));
        }
        if !self.contains(name) {
            return Ok(None);
        }
        self.take_values(name, shape).map(Some)
    }

    /// The values of `name`, which must have `shape`, left in the set.
    pub(super) fn values(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        if self.noted(name, shape, true) {
            return Ok(Vec::new());
        }
        if let Some(q) = self.quantized.get(name) {
            check_shape(name, &[q.rows(), q.cols()], shape)?;
            let mut v = vec![0.0; q.rows() * q.cols()];
            q.widen_into(0..v.len(), &mut v);
            return Ok(v);
        }
        Ok(values(self.checked(name, shape)?)?)
    }

    /// Tensor `name`, which must be there with `shape`.
    fn checked(&self, name: &str, shape: &[usize]) -> Result<&Tensor> {
        let t = self.tensors.get(name).ok_or_else(|| EngineError::MissingTensor(name.to_string()))?;
        check_shape(name, t.dims(), shape)?;
        Ok(t)
    }
}

/// `name`'s shape `found` must be `expected`.
fn check_shape(name: &str, found: &[usize], expected: &[usize]) -> Result<()> {
    if found != expected {
        return Err(EngineError::Shape { name: name.to_string(), found: found.to_vec(), expected: expected.to_vec() });
    }
    Ok(())
}

/// Output features per weight panel of a linear layer (`super::linear::Linear`).
pub(super) const PANEL: usize = 64;
