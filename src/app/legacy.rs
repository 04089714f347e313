//! Settings saved before the features kept their own: the flat keys (`lens_mode`, `dla_target`,
//! `graph_threshold`, `rollout_mode`, …) that today's nested settings (`lens`, `attribution`,
//! `graph`, `rollout`) replaced. A file that has them and not the nested ones is read into the
//! nested ones once, at launch; nothing it held is lost. New settings are nested from the start
//! and never added here.

use serde::de::{Deserialize, Deserializer, IgnoredAny};

use super::state::{
    AttributionSettings, GraphSettings, LensMode, LensSettings, RolloutMode, RolloutSettings, Settings,
};

/// Whether a key was in the file (whatever its value).
#[derive(Debug, Default, Clone, Copy)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d).map(|_| Self(true))
    }
}

/// The flat keys of settings saved before the features kept their own, and whether the nested
/// ones are there.
#[derive(Debug, serde::Deserialize)]
#[serde(default)]
pub struct FlatSettings {
    lens: Present,
    attribution: Present,
    graph: Present,
    rollout: Present,
    lens_mode: LensMode,
    lens_watch: Vec<String>,
    lens_rank_of: usize,
    lens_position: Option<usize>,
    dla_position: Option<usize>,
    dla_target: String,
    dla_versus: String,
    dla_head: Option<(usize, usize)>,
    graph_position: Option<usize>,
    graph_threshold: f32,
    graph_head: Option<(usize, usize, usize)>,
    rollout_mode: RolloutMode,
    head_rollout: bool,
    zoom: Present,
    /// The one zoom every matrix view shared, now the heatmap's own (0: not in the file).
    cell_size: f32,
}

impl Default for FlatSettings {
    fn default() -> Self {
        let (lens, attribution) = (LensSettings::default(), AttributionSettings::default());
        let (graph, rollout) = (GraphSettings::default(), RolloutSettings::default());
        Self {
            lens: Present(false),
            attribution: Present(false),
            graph: Present(false),
            rollout: Present(false),
            lens_mode: lens.mode,
            lens_watch: lens.watch,
            lens_rank_of: lens.rank_of,
            lens_position: lens.position,
            dla_position: attribution.position,
            dla_target: attribution.target,
            dla_versus: attribution.versus,
            dla_head: attribution.head,
            graph_position: graph.position,
            graph_threshold: graph.threshold,
            graph_head: graph.head,
            rollout_mode: rollout.mode,
            head_rollout: rollout.in_head_view,
            zoom: Present(false),
            cell_size: 0.0,
        }
    }
}

impl FlatSettings {
    /// Puts the flat keys into `settings`' nested ones that the file did not have.
    pub fn upgrade(self, settings: &mut Settings) {
        if !self.lens.0 {
            settings.lens = LensSettings {
                mode: self.lens_mode,
                watch: self.lens_watch,
                rank_of: self.lens_rank_of,
                position: self.lens_position,
            };
        }
        if !self.attribution.0 {
            settings.attribution = AttributionSettings {
                position: self.dla_position,
                target: self.dla_target,
                versus: self.dla_versus,
                head: self.dla_head,
            };
        }
        if !self.graph.0 {
            settings.graph =
                GraphSettings { position: self.graph_position, threshold: self.graph_threshold, head: self.graph_head };
        }
        if !self.rollout.0 {
            settings.rollout = RolloutSettings { mode: self.rollout_mode, in_head_view: self.head_rollout };
        }
        if !self.zoom.0 {
            settings.zoom.heatmap = (self.cell_size > 0.0).then_some(self.cell_size);
            settings.zoom.clamp();
        }
    }
}
