//! Compare: the current run beside another sentence, the faithful model or another model folder
//! (run B, asked of the worker when the view is open and its input changes), and the view.

pub mod settings;
pub mod view;

pub use settings::{CompareMode, CompareSettings, CompareSource};

use std::sync::Arc;

use crate::analysis::Run;
use crate::app::session::{RunInput, Session, TokenRun, ViewedFrom, run_spec};
use crate::app::state::{Settings, Source, View};
use crate::app::worker::{Job, RunSpec};

/// Run B of the comparison: as it came, as the views show it, and what is asked for.
#[derive(Default)]
pub struct Feature {
    /// Run B as the views show it (merged into words with the toggle).
    pub run_b: Option<Arc<Run>>,
    /// Run B as it came.
    pub(crate) token_run_b: Option<TokenRun>,
    /// What `run_b` was made from.
    pub(crate) shown_b_from: Option<ViewedFrom>,
    /// Id of run B shown.
    pub compare_id: u64,
    /// Newest comparison requested, and its input.
    pub requested_compare_id: u64,
    requested: Option<RunInput>,
    /// Why run B failed, or why there is none.
    pub error: Option<String>,
}

impl Feature {
    /// Whether a run B newer than the shown one is on its way.
    pub fn is_pending(&self) -> bool {
        self.requested_compare_id > self.compare_id
    }

    /// Forgets the input asked for (a new model: the same input runs again).
    pub fn forget_request(&mut self) {
        self.requested = None;
    }

    /// Takes run B from the worker (dropped when older than the shown one, or no longer asked for).
    pub fn on_compared(&mut self, id: u64, result: Result<Arc<Run>, String>) {
        if id <= self.compare_id || id != self.requested_compare_id {
            return;
        }
        self.compare_id = id;
        match result {
            Ok(run) => {
                self.token_run_b = Some(TokenRun { source_id: id, run, window: None });
                self.error = None;
            }
            Err(e) => {
                self.token_run_b = None;
                self.error = Some(e);
            }
        }
    }
}

impl Feature {
    /// What run B of the comparison is (None: nothing to compare, with the reason).
    fn input(settings: &Settings, session: &Session) -> Result<RunInput, String> {
        let pair = settings.pair().map(str::to_string);
        // B is read with the same target: its decoder and cross-attention compare too.
        let target = session.run_target(settings);
        match settings.compare.source {
            CompareSource::Sentence | CompareSource::Interventions if settings.source == Source::File => Err(
                "An attention file has no model to run another input or the faithful model: compare it with another \
                 attention file or a model folder (Another model)."
                    .into(),
            ),
            CompareSource::Sentence => {
                if settings.compare.text_b.trim().is_empty() {
                    return Err("Type sentence B above to compare.".into());
                }
                let spec = run_spec(settings, &session.playground.active);
                Ok((settings.compare.text_b.clone(), None, target, spec))
            }
            CompareSource::Interventions => {
                if settings.source == Source::Playground {
                    return Err("The playground has no faithful counterpart: switch to the pretrained model.".into());
                }
                if settings.interventions.is_faithful() {
                    return Err("The current run is the faithful model: set an intervention in the side panel \
                                (ablate a head, temperature, …) to compare it with the faithful model."
                        .into());
                }
                let faithful = RunSpec::Pretrained(crate::model::Interventions::default(), None);
                Ok((settings.text.clone(), pair, target, faithful))
            }
            CompareSource::Model => match &settings.compare.model_b {
                Some(dir) => Ok((settings.text.clone(), pair, target, RunSpec::Folder(dir.clone()))),
                None => Err("Choose a second model folder above (it must use the same tokenizer).".into()),
            },
        }
    }

    /// Asks for run B when the comparison view is open and its input changed.
    pub fn request(&mut self, settings: &Settings, session: &Session) {
        if settings.view != View::Compare {
            return;
        }
        match Self::input(settings, session) {
            Err(why) => {
                // A run B still in flight is no longer wanted.
                self.compare_id = self.requested_compare_id;
                self.requested = None;
                self.token_run_b = None;
                self.run_b = None;
                self.shown_b_from = None;
                self.error = Some(why);
            }
            Ok(input) => {
                if self.requested.as_ref() == Some(&input)
                    || (session.model.is_none() && !matches!(input.3, RunSpec::Playground(_)))
                {
                    return;
                }
                let id = session.worker.next_id();
                self.requested_compare_id = id;
                self.error = None;
                let (text, pair, target, spec) = input.clone();
                session.worker.send(Job::Compare { id, text, pair, target, spec });
                self.requested = Some(input);
            }
        }
    }
}
