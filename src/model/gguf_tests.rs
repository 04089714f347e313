//! Unit tests of `gguf.rs`, in a file of their own.
#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn names_map_and_unpermute_inverts_llama_cpp() {
    assert_eq!(canonical_name("blk.12.attn_q.weight", arch("llama")).as_deref(), Some("layer.12.q.weight"));
    assert_eq!(canonical_name("output.weight", arch("llama")).as_deref(), Some("lm_head.weight"));
    assert_eq!(canonical_name("blk.x.attn_q.weight", arch("llama")), None);
    assert_eq!(canonical_name("rope_freqs.weight", arch("llama")), None);
    // llama.cpp: w.reshape(heads, 2, d/2, in).swapaxes(1, 2): rows [0,1,2,3] of one head of 4
    // are stored as [0,2,1,3].
    let stored = Tensor::from_vec(vec![0f32, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0], (8, 1), &Device::Cpu).unwrap();
    let rows: Vec<f32> = unpermute(&stored, 2).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(rows, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    // The same permutation on whole rows (kept blocks), for a larger head too.
    assert_eq!(unpermuted_rows(8, 2), [0, 2, 1, 3, 4, 6, 5, 7]);
    let stored: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let t = Tensor::from_vec(stored.clone(), (24, 1), &Device::Cpu).unwrap();
    let want: Vec<f32> = unpermute(&t, 2).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let got: Vec<f32> = unpermuted_rows(24, 2).into_iter().map(|r| stored[r]).collect();
    assert_eq!(got, want);
    let table = byte_alphabet();
    assert_eq!((table[b' ' as usize], table[b'a' as usize], table[b'\n' as usize]), ('Ġ', 'a', 'Ċ'));
}

fn arch(name: &str) -> &'static Arch {
    ARCHITECTURES.iter().find(|a| a.name == name).unwrap()
}

#[test]
fn metadata_that_changes_the_maths_unread_is_refused_by_name() {
    let none = FromTensors { short_factor: None, long_factor: None, dense_layers: Vec::new() };
    let base = |arch: &str| -> HashMap<String, Value> {
        [
            ("embedding_length", 32u32),
            ("block_count", 2),
            ("attention.head_count", 4),
            ("feed_forward_length", 48),
            ("expert_count", 4),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{arch}.{k}"), Value::U32(v)))
        .collect()
    };
    let mut m = base("olmoe");
    assert!(config_of(&Meta(&m), arch("olmoe"), 64, true, &none).is_ok());
    m.insert("olmoe.expert_weights_scale".into(), Value::F32(2.5));
    let err = config_of(&Meta(&m), arch("olmoe"), 64, true, &none).unwrap_err().to_string();
    assert!(err.contains("olmoe.expert_weights_scale"), "{err}");
    // Rotation over part of each head: Phi-3's partial rotary, refused elsewhere.
    let mut m = base("granite");
    m.insert("granite.rope.dimension_count".into(), Value::U32(4));
    let err = config_of(&Meta(&m), arch("granite"), 64, true, &none).unwrap_err().to_string();
    assert!(err.contains("granite.rope.dimension_count"), "{err}");
    let mut m = base("phi3");
    m.insert("phi3.rope.dimension_count".into(), Value::U32(4));
    let cfg = config_of(&Meta(&m), arch("phi3"), 64, true, &none).unwrap();
    assert!(cfg.contains("\"partial_rotary_factor\":0.5"), "{cfg}");
}

#[test]
fn fused_and_stacked_tensors_are_split_into_canonical_pieces() {
    let cfg = r#"{"model_type":"phi3","vocab_size":64,"hidden_size":32,"num_hidden_layers":1,
        "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":48}"#;
    let (_, desc) = families::describe(cfg).unwrap();
    let names = |p: Vec<Piece>| p.into_iter().map(|p| (p.canon, p.start, p.rows)).collect::<Vec<_>>();
    let qkv = pieces("blk.0.attn_qkv.weight", &[64, 32], arch("phi3"), &desc).unwrap();
    assert_eq!(
        names(qkv),
        [
            ("layer.0.q.weight".to_string(), 0, 32),
            ("layer.0.k.weight".to_string(), 32, 16),
            ("layer.0.v.weight".to_string(), 48, 16)
        ]
    );
    let up = pieces("blk.0.ffn_up.weight", &[96, 32], arch("phi3"), &desc).unwrap();
    assert_eq!(names(up)[1], ("layer.0.up.weight".to_string(), 48, 48));
    let plain = pieces("blk.0.ffn_up.weight", &[48, 32], arch("olmo2"), &desc).unwrap();
    assert_eq!(names(plain), [("layer.0.up.weight".to_string(), 0, 48)]);
    let experts = pieces("blk.3.ffn_down_exps.weight", &[4, 32, 16], arch("olmoe"), &desc).unwrap();
    assert_eq!(names(experts)[2], ("layer.3.expert.2.down.weight".to_string(), 64, 32));
    assert_eq!(
        canonical_name("blk.1.post_ffw_norm.weight", arch("gemma2")).as_deref(),
        Some("layer.1.ffn_out_norm.weight")
    );
}

#[test]
fn gpt_oss_metadata_maps_to_llama_cpp_s_gpt_oss_and_unread_yarn_knobs_are_refused() {
    let none = FromTensors { short_factor: None, long_factor: None, dense_layers: Vec::new() };
    let mut m: HashMap<String, Value> = [
        ("embedding_length", 32u32),
        ("block_count", 3),
        ("attention.head_count", 4),
        ("feed_forward_length", 48),
        ("expert_feed_forward_length", 32),
        ("expert_count", 4),
        ("expert_used_count", 2),
        ("attention.sliding_window", 8),
        ("rope.scaling.original_context_length", 4096),
    ]
    .into_iter()
    .map(|(k, v)| (format!("gpt-oss.{k}"), Value::U32(v)))
    .collect();
    m.insert("gpt-oss.rope.scaling.type".into(), Value::String("yarn".into()));
    m.insert("gpt-oss.rope.scaling.factor".into(), Value::F32(32.0));
    let cfg = config_of(&Meta(&m), arch("gpt-oss"), 64, false, &none).unwrap();
    let (_, d) = families::describe(&cfg).unwrap();
    assert_eq!(d.sliding_layers, [true, false, true], "llama.cpp's pattern of 2");
    let e = d.experts.unwrap();
    assert_eq!((e.width, e.glu), (32, crate::model::describe::Glu::Clamped { alpha: 1.702, limit: 7.0 }));
    let rot = d.rotary.unwrap();
    assert!(matches!(rot.scaling, crate::model::describe::RopeScaling::Yarn { truncate: true, .. }), "{cfg}");
    for key in ["yarn_ext_factor", "yarn_attn_factor", "yarn_log_multiplier"] {
        let mut m = m.clone();
        m.insert(format!("gpt-oss.rope.scaling.{key}"), Value::F32(0.5));
        let err = config_of(&Meta(&m), arch("gpt-oss"), 64, false, &none).unwrap_err().to_string();
        assert!(err.contains(&format!("gpt-oss.rope.scaling.{key}")), "{err}");
    }
    // The MLP's input norm is `post_attention_norm` for gpt-oss, Gemma's attention output norm else.
    assert_eq!(
        canonical_name("blk.0.post_attention_norm.weight", arch("gpt-oss")).as_deref(),
        Some("layer.0.ffn_norm.weight")
    );
    assert_eq!(
        canonical_name("blk.0.post_attention_norm.weight", arch("gemma3")).as_deref(),
        Some("layer.0.attn_out_norm.weight")
    );
    assert_eq!(canonical_name("blk.2.attn_sinks.weight", arch("gpt-oss")).as_deref(), Some("layer.2.sinks"));
}
