//! Attention knockout from the attention views: a cell of the heatmap or a line of the head view
//! is knocked out from its context menu (or with Alt+click in the heatmap), as is a query from
//! every earlier key in the layers from the shown one on. The entries are interventions: every
//! view, export and dump of the modified model says so.

use egui::{Color32, Pos2, Rect, RichText, Stroke};

use crate::analysis::Run;
use crate::app::data::ViewData;
use crate::app::state::{Settings, Source};
use crate::model::Interventions;
use crate::model::intervene::Knockout;

/// Why knockout cannot be set on what is shown (Ok: the layers it can be set in).
pub fn knockable(data: &ViewData<'_>) -> Result<usize, &'static str> {
    let (Some(model), Some(run)) = (data.model, data.run) else { return Err("no model is loaded") };
    if data.settings.source != Source::Pretrained || run.playground {
        return Err("knockout changes the loaded model: the playground and attention files have none");
    }
    if model.seq2seq {
        return Err("knockout is set on a decoder-only or encoder model, not an encoder–decoder");
    }
    if data.settings.words {
        return Err("turn “Words” off: knockout names token positions");
    }
    if run.long.is_some() {
        return Err("the input is longer than what is recorded at token level");
    }
    if data.generation.is_some() {
        return Err("knockout is set on the typed text: the shown run holds written tokens (edit the text first)");
    }
    Ok(data.settings.interventions.first_layers.unwrap_or(run.attention.layers()))
}

/// Whether query `q` may not attend to key `k` in layer `layer`.
pub fn is_knocked_out(iv: &Interventions, layer: usize, q: usize, k: usize) -> bool {
    iv.knockout.contains(&Knockout { layer: Some(layer), query: q, key: k })
        || iv.knockout.contains(&Knockout { layer: None, query: q, key: k })
}

/// The keys query `q` of `run` sees in layer `layer` (its mask).
fn visible(run: &Run, layer: usize, q: usize) -> std::ops::Range<usize> {
    let n = run.tokens.len();
    let start = run.window_of(layer).map_or(0, |w| (q + 1).saturating_sub(w));
    if !run.causal {
        return start.min(n)..n;
    }
    start..q + 1
}

/// `iv` with `entries` knocked out, or why the pass would refuse it (a query left no key).
fn with(iv: &Interventions, run: &Run, layers: usize, entries: &[Knockout]) -> Result<Interventions, String> {
    let mut next = iv.clone();
    next.knockout.extend(entries.iter().copied());
    next.check_knockout(run.tokens.len(), layers, |l, q| visible(run, l, q))?;
    Ok(next)
}

/// Knocks out (or restores) `q` → `k` in `layer` (Alt+click on a heatmap cell): Err says why not.
pub fn toggle(
    settings: &mut Settings,
    run: &Run,
    layers: usize,
    layer: usize,
    (q, k): (usize, usize),
) -> Result<(), String> {
    let iv = &mut settings.interventions;
    let here = Knockout { layer: Some(layer), query: q, key: k };
    if is_knocked_out(iv, layer, q, k) {
        iv.knockout.remove(&here);
        iv.knockout.remove(&Knockout { layer: None, ..here });
        return Ok(());
    }
    *iv = with(iv, run, layers, &[here])?;
    Ok(())
}

/// The context menu of an attention entry (or of a query, `k` None): knock the entry out in this
/// layer or every layer, knock its query out from every earlier key in layers ≥ this one,
/// restore. `labels`: the query's and the key's tokens.
pub fn menu_ui(
    ui: &mut egui::Ui,
    interventions: &mut Interventions,
    run: &Run,
    (layers, layer): (usize, usize),
    (q, k): (usize, Option<usize>),
    (q_label, k_label): (&str, &str),
) {
    match k {
        Some(k) => ui.label(RichText::new(format!("Query “{q_label}” (#{q}) → key “{k_label}” (#{k})")).strong()),
        None => ui.label(RichText::new(format!("Query “{q_label}” (#{q})")).strong()),
    };
    let iv = interventions.clone();
    // A button that would set `entries`: disabled (saying why) when the pass would refuse them.
    let apply = |ui: &mut egui::Ui, label: String, entries: Vec<Knockout>| -> Option<Interventions> {
        let result = with(&iv, run, layers, &entries);
        let enabled = result.is_ok() && entries.iter().any(|e| !iv.knockout.contains(e));
        let button = ui.add_enabled(enabled, egui::Button::new(label));
        let button = match &result {
            Err(why) => button.on_disabled_hover_text(why.as_str()),
            Ok(_) => button,
        };
        button.clicked().then_some(result.ok()).flatten()
    };
    let mut chosen = None;
    if let Some(k) = k
        && is_knocked_out(&iv, layer, q, k)
    {
        if ui.button(format!("Restore this entry (layer {layer})")).clicked() {
            let mut next = iv.clone();
            next.knockout.remove(&Knockout { layer: Some(layer), query: q, key: k });
            next.knockout.remove(&Knockout { layer: None, query: q, key: k });
            chosen = Some(next);
        }
    } else if let Some(k) = k {
        let here = Knockout { layer: Some(layer), query: q, key: k };
        chosen = chosen.or(apply(ui, format!("Knock out in layer {layer}"), vec![here]));
        chosen = chosen.or(apply(ui, "Knock out in every layer".into(), vec![Knockout { layer: None, ..here }]));
    }
    let earlier: Vec<Knockout> = (layer..layers)
        .flat_map(|l| (0..q).map(move |key| Knockout { layer: Some(l), query: q, key }))
        .filter(|e| e.layer.is_some_and(|l| visible(run, l, q).contains(&e.key)))
        .collect();
    if !earlier.is_empty() {
        let last = layers - 1;
        let span = if layer == last { format!("layer {layer}") } else { format!("layers {layer} to {last}") };
        chosen = chosen.or(apply(ui, format!("Knock out “{q_label}” from every earlier key in {span}"), earlier));
    }
    if !iv.knockout.is_empty() && ui.button("Restore every knockout").clicked() {
        chosen = Some(Interventions { knockout: std::collections::BTreeSet::new(), ..iv.clone() });
    }
    if let Some(next) = chosen {
        *interventions = next;
        ui.close();
    }
}

/// Marks a knocked-out entry's cell: a cross over it (its weight is zero by intervention, not by
/// what the model computed).
pub fn mark_cell(painter: &egui::Painter, rect: Rect, color: Color32) {
    let r = rect.shrink(rect.width().min(rect.height()) * 0.15);
    let stroke = Stroke::new((rect.width().min(rect.height()) / 8.0).clamp(1.0, 2.5), color);
    painter.line_segment([r.left_top(), r.right_bottom()], stroke);
    painter.line_segment([r.right_top(), r.left_bottom()], stroke);
}

/// Draws a knocked-out line of the head view: dashed, from the query to the key, with a cross
/// half-way.
pub fn mark_line(painter: &egui::Painter, from: Pos2, to: Pos2, color: Color32) {
    let stroke = Stroke::new(1.5, color);
    painter.add(egui::Shape::dashed_line(&[from, to], stroke, 6.0, 4.0));
    let mid = from + (to - from) * 0.5;
    mark_cell(painter, Rect::from_center_size(mid, egui::vec2(10.0, 10.0)), color);
}
