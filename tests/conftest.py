import random
from pathlib import Path

import pytest

WORDS = (
    "the a of cat cats running runs ran quickly quick brown fox jumped jumps over lazy dog dogs "
    "model models evaluation evaluating agent agents tool tools called calling 2024 42 3.14 "
    "Paris café naïve über résumé data pipeline pipelines beam beams stem stemming stemmed "
    "generously generous generation generated Mr. Dr. U.S. e.g. etc. it's don't well-known"
).split()
PUNCT = [".", ",", "!", "?", ";", ":", " -", "\n"]


def random_text(rng: random.Random, min_words=0, max_words=40) -> str:
    n = rng.randint(min_words, max_words)
    out = []
    for i in range(n):
        w = rng.choice(WORDS)
        if rng.random() < 0.1:
            w = w.capitalize()
        out.append(w)
        if rng.random() < 0.15:
            out[-1] += rng.choice(PUNCT)
    return " ".join(out)


def text_pairs(seed: int, count: int):
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        ref = random_text(rng)
        if rng.random() < 0.5:  # a related candidate: edited copy of the reference
            words = ref.split(" ")
            words = [w for w in words if rng.random() > 0.2] + [rng.choice(WORDS) for _ in range(rng.randint(0, 5))]
            hyp = " ".join(words)
        else:
            hyp = random_text(rng)
        pairs.append((ref, hyp))
    pairs += [("", ""), ("", "something"), ("something", ""), ("Same text.", "Same text."), ("!!!", "???")]
    return pairs


@pytest.fixture
def rng():
    return random.Random(1234)


# The heavy tiers: a marker each, applied below. `make test` runs every tier; `make test-fast`
# (.venv only) runs what is in none of them: -m "not emulators and not browser and ...".
TIERS = {
    "emulators": "the Cloud Storage and BigQuery emulators (.emulators/: `make emulators-env`): tests using the `cloud` fixture",
    "browser": "headless Chromium (`make browser`): the report rendered",
    "airflow": "Apache Airflow in .airflow/ (`make airflow`)",
    "adk": "google-adk, the reference, in .adk/ (`make adk-env`)",
    "agent": "evalbeam[agent] in .agent/ (`make agent-env`)",
    "packaging": "builds the sdist and installs it into a fresh venv (needs only .venv)",
    "pythons": "a fresh venv from the lock and the demo on each supported Python found here (setup.py's PYTHONS)",
    "slow": "more than ~4 s on a loaded 2-core machine (SLOW below), and in no other tier",
}

# What puts a test in a tier: (its module under tests/, or None for any module; the names it must
# use: fixtures, directly or through other fixtures, or functions of its module it calls; or None
# for every test of the module). A new test that uses or calls one of these is in the tier too.
TIER_RULES = [
    (None, {"cloud"}, "emulators"),
    ("pipelines/test_report.py", {"render", "chromium"}, "browser"),
    ("pipelines/test_nightly_dag.py", None, "airflow"),
    ("metrics/test_adk_fidelity.py", None, "adk"),
    ("metrics/agents/test_simulator.py", {"adk_simulator", "in_agent_env"}, "adk"),
    ("metrics/statistics/test_calibration.py", {"sklearn_reference"}, "adk"),
    ("metrics/test_borrowed_names.py", {"adk_names"}, "adk"),
    ("transforms/test_adk_events.py", {"events_table", "recorded", "plugin_schema"}, "adk"),
    ("transforms/test_adk_files.py", {"adk_reference"}, "adk"),
    ("transforms/test_inference.py", {"agent_env"}, "agent"),
    ("transforms/test_read_otel.py", {"agent_env"}, "agent"),
    ("metrics/judge/test_agent_judges.py", {"agent_evalbeam"}, "agent"),
    ("metrics/judge/test_adk_judges.py", None, "agent"),
    ("transforms/test_simulator.py", {"agent_env", "in_agent_env"}, "agent"),
    ("transforms/test_deployed.py", {"agent_env", "A2AServer", "AdkAppServer", "in_process"}, "agent"),
    ("transforms/test_deployed_auth.py", {"A2AServer", "guarded"}, "agent"),
    ("transforms/test_deployed_simulation.py", None, "agent"),
    ("pipelines/test_packaging.py", {"installed", "build_sdist"}, "packaging"),
    ("pipelines/test_pythons.py", {"pythons_installed"}, "pythons"),
]

# Measured with --durations=80 (2 cores shared with other runs, load ~4.5): the tests of no other tier
# that took 4.4 s or more (up to 100 s), with their parameters; the 20 s mark left 14 minutes.
SLOW = {
    "transforms/test_read_otel.py::test_spans_in_any_order_and_file_group_into_cases_and_reconcile",
    "transforms/test_read_otel.py::test_a_whole_run_scores_the_cases_and_counts_spans",
    "transforms/test_failure_modes.py::test_planted_failures_counted_per_mode_and_slice_and_a_cached_rerun",
    "transforms/test_failure_modes.py::test_discovered_taxonomy_is_stored_pinned_and_reused_by_digest",
    "transforms/test_failure_modes.py::test_the_discovery_sample_is_seeded_and_a_failed_discovery_loses_no_row",
    "transforms/test_failure_modes.py::test_compare_says_which_modes_grew_per_slice_and_refuses_other_taxonomies",
    "transforms/test_failure_modes.py::test_the_report_charts_modes_per_slice_linked_to_example_instances",
    "transforms/test_failure_modes.py::test_an_agent_run_that_failed_is_a_failure_and_batch_mode_classifies_the_same",
    "transforms/test_failure_modes.py::test_the_example_config_classifies_every_failed_adk_criterion",
    "metrics/test_adk.py::test_the_adk_demo_runs",
    "metrics/test_adk.py::test_vertex_flat_jsonl_with_agent_data",
    "metrics/judge/test_agent_judges.py::test_agent_judges_in_a_pipeline_with_adks_aggregation_and_the_cache",
    "metrics/judge/test_agent_judges.py::test_demo_agent_judges_config_runs",
    "metrics/statistics/test_compare.py::test_compare_flags_the_regressed_slice_and_is_a_ci_gate",
    "metrics/statistics/test_compare.py::test_compare_refuses_unknown_runs",
    "metrics/judge/test_judge.py::test_a_key_echoed_in_judge_errors_is_redacted_end_to_end",
    "metrics/judge/test_judge.py::test_a_rerun_with_the_cache_makes_no_call",
    "metrics/judge/test_judge.py::test_a_slow_call_at_the_end_gets_one_copy_counted_as_a_call",
    "metrics/judge/test_judge.py::test_a_slow_call_whose_copy_fails_gets_one_more_copy",
    "metrics/judge/test_judge.py::test_bad_judge_config_is_named",
    "metrics/judge/test_judge.py::test_calls_in_flight_grow_past_a_fixed_window_when_the_quota_needs_them",
    "metrics/judge/test_judge.py::test_client_adapts_to_429_and_loses_nothing",
    "metrics/judge/test_judge.py::test_client_stays_under_the_quota",
    "metrics/judge/test_judge.py::test_demo_judge_configs_run",
    "metrics/judge/test_judge.py::test_judge_metrics_end_to_end",
    "metrics/judge/test_judge.py::test_missing_credentials_fail_before_the_pipeline",
    "metrics/judge/test_judge.py::test_sampling_aggregates_with_confidence",
    "metrics/judge/test_judge_batch.py::test_batch_mode_end_to_end_scores_as_online_at_half_the_price",
    "metrics/judge/test_judge_vertex.py::test_vertex_ai_end_to_end_with_application_default_credentials",
    "metrics/judge/test_judge_vertex.py::test_vertex_ai_without_credentials_or_project_fails_before_the_pipeline",
    "metrics/judge/test_rubrics.py::test_demo_rubrics_config_runs_and_its_pinned_rerun_generates_nothing",
    "metrics/judge/test_rubrics.py::test_given_rubrics_skip_generation_and_a_missing_group_is_a_row_error",
    "metrics/judge/test_rubrics.py::test_judge_faults_are_retried_and_failures_stay_on_their_rows",
    "metrics/judge/test_rubrics.py::test_multi_turn_metrics_read_the_history",
    "metrics/judge/test_rubrics.py::test_pinned_rubrics_and_the_cache_skip_the_judge",
    "metrics/judge/test_rubrics.py::test_rubric_metrics_end_to_end",
    "metrics/judge/test_rubrics.py::test_samples_majority_per_rubric_a_tie_is_no",
    "metrics/judge/test_judge_providers.py::test_client_honours_429_retry_after_and_loses_nothing",
    "metrics/judge/test_judge_providers.py::test_client_retries_5xx_timeouts_and_malformed_output_then_gives_up_with_the_reason",
    "metrics/judge/test_judge_providers.py::test_two_judges_of_different_providers_in_one_pipeline",
    "metrics/judge/test_judge_providers.py::test_evalbeam_run_with_a_provider_counts_tokens_and_cost_and_never_shows_the_key",
    "pipelines/test_cli.py::test_a_configs_relative_paths_are_found_from_any_current_folder",
    "pipelines/test_cli.py::test_a_latin1_csv_is_read_with_input_encoding",
    "pipelines/test_cli.py::test_a_second_ctrl_c_ends_the_command_at_once",
    "pipelines/test_cli.py::test_beam_flags_pass_through_and_results_do_not_depend_on_the_runner_mode",
    "pipelines/test_cli.py::test_beams_numeric_flags_out_of_range_are_usage_errors",
    "pipelines/test_cli.py::test_csv_demo_config_runs",
    "pipelines/test_cli.py::test_ctrl_c_ends_a_run_in_one_line_with_status_130",
    "pipelines/test_cli.py::test_make_demo_judge_runs_a_judge_config_against_the_stand_in_and_says_its_scores_mean_nothing",
    "pipelines/test_cli.py::test_output_that_cannot_be_written_is_not_a_success",
    "pipelines/test_cli.py::test_rerunning_a_run_id_replaces_its_output",
    "pipelines/test_cli.py::test_run_writes_every_table_and_counts_reconcile",
    "pipelines/test_cli.py::test_runs_with_a_config_lists_that_configs_eval_only",
    "pipelines/test_cli.py::test_show_and_runs_read_a_run_without_beam",
    "pipelines/test_cli.py::test_validate_ok_and_missing_input_files",
    "pipelines/test_plan.py::test_plan_counts_what_the_run_then_asks_and_the_cache_removes",
    "pipelines/test_plan.py::test_plan_needs_no_key_and_run_still_does",
    "pipelines/test_plan.py::test_plan_prints_a_table_and_checks_inputs_like_validate",
    "pipelines/test_reliability.py::test_a_metric_with_no_valid_score_fails_the_run_with_its_reasons",
    "pipelines/test_reliability.py::test_a_run_that_dies_leaves_the_previous_output_of_its_run_id",
    "pipelines/test_reliability.py::test_duplicate_ids_never_share_a_judge_verdict",
    "pipelines/test_reliability.py::test_mistyped_flags_and_unknown_runners_are_errors",
    "pipelines/test_reliability.py::test_show_and_runs_on_missing_or_broken_results",
    "pipelines/test_report.py::test_show_json_and_report_carry_the_judge_accounting",
    "pipelines/test_run_outcomes.py::test_a_full_disk_ends_the_run_with_120_and_one_line_leaving_the_previous_output",
    "pipelines/test_run_outcomes.py::test_a_run_that_scores_nothing_or_dead_letters_too_much_fails",
    "pipelines/test_run_outcomes.py::test_compare_refuses_what_pairs_too_little_or_another_eval",
    "pipelines/test_run_outcomes.py::test_compare_with_in_a_run_gates_the_same_way",
    "transforms/test_hostile.py::test_a_corrupt_compressed_file_costs_only_what_cannot_be_read",
    "transforms/test_hostile.py::test_hostile_csv_corpus",
    "transforms/test_hostile.py::test_hostile_jsonl_corpus",
    "transforms/test_hostile.py::test_hostile_jsonl_dead_letters_are_listed_in_source_order",
    "transforms/test_deployed.py::test_a_whole_run_on_agent_engine_killed_and_rerun_repeats_only_unsaved_cases",
    "transforms/test_deployed.py::test_a_full_disk_while_inference_checkpoints_ends_the_run_with_120_in_one_line",
    "transforms/test_judge_durability.py::test_a_full_disk_while_judging_ends_the_run_with_120_in_one_line",
    "transforms/test_deployed.py::test_a2a_retries_resend_only_the_failed_message",
    "transforms/test_deployed.py::test_the_example_configs_validate_and_an_unreachable_endpoint_fails_in_one_line",
    "transforms/test_inference.py::test_a_judge_metric_over_multi_turn_cases_from_inference",
    "transforms/test_inference.py::test_function_agent_over_an_adk_eval_set_with_runs",
    "transforms/test_inference.py::test_function_inference_end_to_end",
    "transforms/test_inference.py::test_inference_demo",
    "transforms/test_inference.py::test_model_inference_through_the_judge_layer_and_its_cache",
    "transforms/test_simulator.py::test_scenarios_run_with_the_simulator_through_the_judge_layer_and_its_cache",
    "transforms/test_simulator.py::test_per_turn_user_simulator_quality_in_a_run",
    "transforms/test_simulator.py::test_runs_are_separate_simulations_and_checkpointed_answers_are_not_asked_again",
    "transforms/test_simulator.py::test_a_scenario_run_without_the_agent_extra_stops_before_it_starts",
    "transforms/test_judge_durability.py::test_a_batch_run_killed_while_its_jobs_run_resumes_them_without_resubmitting",
    "transforms/test_judge_durability.py::test_a_run_killed_while_judging_repeats_only_its_last_seconds",
    "transforms/test_progress.py::test_a_run_prints_its_run_id_first_and_its_final_counts",
    "transforms/test_progress.py::test_counts_from_worker_processes_are_summed",
    "transforms/test_progress.py::test_rows_are_counted_read_as_they_are_read",
    "transforms/test_read_parts.py::test_a_large_input_uses_every_core_by_default_with_the_same_results",
    "transforms/test_run_ownership.py::test_a_held_run_id_is_refused_before_any_work_and_a_dead_holders_lock_is_taken",
    "transforms/test_run_ownership.py::test_plain_runs_started_in_the_same_second_get_their_own_run_ids",
    "transforms/test_run_ownership.py::test_runs_of_one_run_id_started_together_leave_one_whole_output",
    "transforms/test_transforms.py::test_direct_parquet_writes_hold_what_beams_sink_writes",
    "pipelines/test_calibration.py::test_the_calibration_table_holds_each_labelled_metric_per_slice",
    "pipelines/test_calibration.py::test_the_report_shows_agreement_and_a_confusion_heat_map_per_metric",
    "pipelines/test_calibration.py::test_compare_says_which_runs_judge_agrees_more_with_the_people",
    "transforms/test_jury.py::test_a_jury_end_to_end",
    "transforms/test_jury.py::test_each_juror_calls_its_own_model_and_its_judgment_stays_on_the_row",
    "transforms/test_jury.py::test_a_tie_a_quorum_and_a_pairwise_jury",
    "pipelines/test_calibration.py::test_corrected_estimates_through_run_show_and_plan",
    "pipelines/test_mixed_judges.py::test_metrics_judged_by_three_providers_in_one_run",
    "pipelines/test_mixed_judges.py::test_batch_mode_sends_each_providers_judgments_to_its_own_batch_api",
    "transforms/test_jury.py::test_two_jurors_of_one_model_never_together_exceed_its_quota",
    "transforms/test_jury.py::test_a_jurors_answers_reused_from_checkpoints_keep_its_model",
}


# pytest.ini's timeout (900 s) is per test; the tiers that install whole environments (their pip installs
# time out at up to 1800 s: tests/pipelines/test_pythons.py) get this many seconds instead.
LONG_TIMEOUT = {"packaging": 2400, "pythons": 2400}


def pytest_configure(config):
    # Beam's TestPipeline is named like a test class; it is not one.
    config.addinivalue_line("filterwarnings", "ignore:cannot collect test class 'TestPipeline':pytest.PytestCollectionWarning")
    for name, needs in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {needs}")


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    for item in items:
        module = item.path.relative_to(tests).as_posix()
        function = getattr(item, "function", None)
        used = set(getattr(item, "fixturenames", ())) | set(getattr(getattr(function, "__code__", None), "co_names", ()))
        tiers = {tier for where, names, tier in TIER_RULES
                 if where in (None, module) and (names is None or names & used)}
        if not tiers and f"{module}::{item.originalname}" in SLOW:
            tiers.add("slow")
        for tier in sorted(tiers):
            item.add_marker(tier)
        longest = max((LONG_TIMEOUT[t] for t in tiers if t in LONG_TIMEOUT), default=None)
        if longest and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(longest))
    stale = stale_slow_entries(config, tests, items)
    if stale:
        pytest.exit("tests/conftest.py's SLOW names no collected test: " + ", ".join(stale)
                    + " (renamed or removed? fix the list)", returncode=pytest.ExitCode.USAGE_ERROR)


def stale_slow_entries(config, tests: Path, items) -> list:
    """The entries of SLOW that name no collected test, so that the list cannot rot. Judged only for the
    modules this session collects whole: those under a file or folder argument given without `::` (this
    hook sees the items before -k, -m and --deselect take theirs). An entry whose module file is missing is
    stale; a module of which nothing was collected (--ignore, --lf) is not judged."""
    whole = [Path(config.invocation_params.dir, arg).resolve() for arg in config.args if "::" not in arg]
    collected = {}
    for item in items:
        collected.setdefault(item.path.relative_to(tests).as_posix(), set()).add(getattr(item, "originalname", item.name))
    stale = []
    for entry in sorted(SLOW):
        module, _, name = entry.partition("::")
        path = tests / module
        if not any(path == root or path.is_relative_to(root) for root in whole):
            continue
        if not path.exists() or (module in collected and name not in collected[module]):
            stale.append(entry)
    return stale


def pytest_collection_finish(session):
    # The `pythons` tier's installs (minutes each) start now, beside the tests before them. Not in a worker
    # process of pytest-xdist (`make test`: -n): each collects every test, and which one runs these is known
    # only when it gets them (one worker: --dist loadscope gives a module's tests to one worker); there
    # `pythons_installed` starts them, while the other workers go on with the other tests.
    if session.config.option.collectonly or hasattr(session.config, "workerinput"):
        return
    if any("pythons_installed" in getattr(item, "fixturenames", ()) for item in session.items):
        from tests.pipelines.test_pythons import selected_versions, start_installs

        start_installs(selected_versions(session.items))


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """run(CONFIG): `evalbeam run CONFIG` of one of configs/ (run_id `demo`, its output in a folder of this
    session), run once per session (per pytest-xdist worker) and shared by the tests that only read what it
    printed and wrote: (the completed command, the run's folder)."""
    from tests.helpers import evalbeam

    runs = {}

    def run(config: str):
        if config not in runs:
            out = tmp_path_factory.mktemp("demo")
            runs[config] = (evalbeam("run", config, "--set", f"output.parquet={out}", "--set", "run_id=demo"), out / "demo")
        return runs[config]

    return run


@pytest.fixture(scope="session")
def cloud(tmp_path_factory):
    """The Cloud Storage and BigQuery emulators (installed by `make test`),
    started on free loopback ports for this test session, with the variables
    that route the real clients to them set in this process (and so in every
    `evalbeam` subprocess and DirectRunner worker)."""
    import os
    from pathlib import Path

    from tests.emulators import control

    root = Path(__file__).resolve().parent.parent / ".emulators"
    if not (root / ".installed").exists():
        pytest.fail("the emulators are not installed: run `make emulators-env` (or `make test`)")
    ports = {"storage": control.free_port(), "bigquery": control.free_port(), "bigquery_grpc": control.free_port()}
    running = control.start(root, tmp_path_factory.mktemp("emulators"), ports)
    saved = {k: os.environ.get(k) for k in running.env}
    os.environ.update(running.env)
    try:
        yield running
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for p in running.processes:
            p.terminate()
        for p in running.processes:
            p.wait(timeout=30)
