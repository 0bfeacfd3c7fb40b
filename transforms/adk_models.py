"""The keys ADK 2.13's models accept in an EvalSet or EvalSetResult file, and the keys they forbid.

ADK reads an eval set with `EvalSet.model_validate_json`, and a result file
(`*.evalset_result.json`) with `EvalSetResult.model_validate_json`: its pydantic models
(google.adk.evaluation and the google.genai types inside them) mostly set
extra="forbid", so one unknown key anywhere (a typo `final_respone`, or
`expected_tool_use` inside an invocation) refuses the whole file. The run path
must not import google-adk (an extra of a gigabyte), so the table of those
models is kept here: per model, ADK's `extra` policy, whether it takes camelCase
aliases (populate_by_name: either spelling; given both, the camelCase one is the
field and the other is an extra key, as pydantic decides; False for EvalSet and for
ADK's CacheMetadata, which have none), and each field's type
as far as models sit inside it. tests/transforms/test_adk_files.py rebuilds the
table from the installed reference (tests/adk_env/adk_models.py) and requires it
equal, and compares this module's verdicts with ADK's on generated files.

Type expressions: None (no model inside), "Model", ("list", T), ("dict", T)
(the values), ("tuple", T, ...), ("union", T, ...).
"""
from __future__ import annotations

import functools
from typing import Any, Iterator

from evalbeam.metrics.rows.trace import camel_case

EXTRA_FORBIDDEN = "Extra inputs are not permitted"  # pydantic's message for extra_forbidden, as ADK reports it

# Generated from google-adk 2.13.0 (tests/adk_env/adk_models.py): the models reachable from EvalSet and from
# EvalSetResult, model -> (extra, camel aliases, field -> type)
MODELS: dict[str, tuple[str, bool, dict[str, Any]]] = \
{'AgentDetails': ('forbid', True, {'instructions': None, 'name': None, 'tool_declarations': None}),
 'AppDetails': ('forbid', True, {'agent_details': ('dict', 'AgentDetails')}),
 'BaseCriterion': ('allow', True, {'include_intermediate_responses_in_final': None, 'threshold': None}),
 'Blob': ('forbid', True, {'data': None, 'display_name': None, 'mime_type': None}),
 'CacheMetadata': ('forbid',
                   False,
                   {'cache_name': None,
                    'contents_count': None,
                    'created_at': None,
                    'expire_time': None,
                    'fingerprint': None,
                    'invocations_used': None}),
 'Citation': ('forbid',
              True,
              {'end_index': None,
               'license': None,
               'publication_date': 'GoogleTypeDate',
               'start_index': None,
               'title': None,
               'uri': None}),
 'CitationMetadata': ('forbid', True, {'citations': ('list', 'Citation')}),
 'CodeExecutionResult': ('forbid', True, {'id': None, 'outcome': None, 'output': None}),
 'Content': ('forbid', True, {'parts': ('list', 'Part'), 'role': None}),
 'ConversationScenario': ('forbid',
                          True,
                          {'conversation_plan': None, 'starting_prompt': None, 'user_persona': 'UserPersona'}),
 'DurationDetails': ('forbid',
                     True,
                     {'framework_seconds': None, 'model_seconds': None, 'tool_seconds': None, 'total_seconds': None}),
 'EvalCase': ('allow',
              True,
              {'conversation': ('list', 'Invocation'),
               'conversation_scenario': 'ConversationScenario',
               'creation_timestamp': None,
               'eval_id': None,
               'final_session_state': None,
               'rubrics': ('list', 'Rubric'),
               'session_input': 'SessionInput'}),
 'EvalCaseResult': ('ignore',
                    True,
                    {'eval_id': None,
                     'eval_metric_result_per_invocation': ('list', 'EvalMetricResultPerInvocation'),
                     'eval_metric_results': ('list', ('tuple', 'EvalMetric', 'EvalMetricResult')),
                     'eval_set_file': None,
                     'eval_set_id': None,
                     'final_eval_status': None,
                     'overall_eval_metric_results': ('list', 'EvalMetricResult'),
                     'session_details': 'Session',
                     'session_id': None,
                     'user_id': None}),
 'EvalMetric': ('forbid',
                True,
                {'criterion': 'BaseCriterion', 'custom_function_path': None, 'metric_name': None, 'threshold': None}),
 'EvalMetricResult': ('forbid',
                      True,
                      {'criterion': 'BaseCriterion',
                       'custom_function_path': None,
                       'details': 'EvalMetricResultDetails',
                       'eval_status': None,
                       'metric_name': None,
                       'score': None,
                       'threshold': None}),
 'EvalMetricResultDetails': ('forbid',
                             True,
                             {'duration_details': 'DurationDetails',
                              'rubric_scores': ('list', 'RubricScore'),
                              'token_usage_details': 'TokenUsageDetails'}),
 'EvalMetricResultPerInvocation': ('forbid',
                                   True,
                                   {'actual_invocation': 'Invocation',
                                    'eval_metric_results': ('list', 'EvalMetricResult'),
                                    'expected_invocation': 'Invocation'}),
 'EvalSet': ('ignore',
             False,
             {'creation_timestamp': None,
              'description': None,
              'eval_cases': ('list', 'EvalCase'),
              'eval_set_id': None,
              'name': None}),
 'EvalSetResult': ('ignore',
                   True,
                   {'creation_timestamp': None,
                    'eval_case_results': ('list', 'EvalCaseResult'),
                    'eval_set_id': None,
                    'eval_set_result_id': None,
                    'eval_set_result_name': None}),
 'Event': ('ignore',
           True,
           {'actions': 'EventActions',
            'author': None,
            'avg_logprobs': None,
            'branch': None,
            'cache_metadata': 'CacheMetadata',
            'citation_metadata': 'CitationMetadata',
            'content': 'Content',
            'custom_metadata': None,
            'environment_id': None,
            'error_code': None,
            'error_message': None,
            'finish_reason': None,
            'go_away': 'LiveServerGoAway',
            'grounding_metadata': 'GroundingMetadata',
            'id': None,
            'input_transcription': 'Transcription',
            'interaction_id': None,
            'interaction_status': None,
            'interrupted': None,
            'invocation_id': None,
            'isolation_scope': None,
            'live_session_id': None,
            'live_session_resumption_update': 'LiveServerSessionResumptionUpdate',
            'logprobs_result': 'LogprobsResult',
            'long_running_tool_ids': None,
            'model_version': None,
            'node_info': 'NodeInfo',
            'output': None,
            'output_transcription': 'Transcription',
            'partial': None,
            'timestamp': None,
            'turn_complete': None,
            'turn_complete_reason': None,
            'usage_metadata': 'GenerateContentResponseUsageMetadata',
            'voice_activity': 'VoiceActivity'}),
 'EventActions': ('forbid',
                  True,
                  {'agent_state': None,
                   'artifact_delta': None,
                   'compaction': 'EventCompaction',
                   'end_of_agent': None,
                   'escalate': None,
                   'render_ui_widgets': ('list', 'UiWidget'),
                   'requested_auth_configs': None,
                   'requested_tool_confirmations': ('dict', 'ToolConfirmation'),
                   'rewind_before_invocation_id': None,
                   'route': None,
                   'set_model_response': None,
                   'skip_summarization': None,
                   'state_delta': None,
                   'transfer_reason': None,
                   'transfer_to_agent': None}),
 'EventCompaction': ('forbid', True, {'compacted_content': 'Content', 'end_timestamp': None, 'start_timestamp': None}),
 'ExecutableCode': ('forbid', True, {'code': None, 'id': None, 'language': None}),
 'FileData': ('forbid', True, {'display_name': None, 'file_uri': None, 'mime_type': None}),
 'FunctionCall': ('forbid',
                  True,
                  {'args': None,
                   'id': None,
                   'name': None,
                   'partial_args': ('list', 'PartialArg'),
                   'will_continue': None}),
 'FunctionResponse': ('forbid',
                      True,
                      {'id': None,
                       'name': None,
                       'parts': ('list', 'FunctionResponsePart'),
                       'response': None,
                       'scheduling': None,
                       'will_continue': None}),
 'FunctionResponseBlob': ('forbid', True, {'data': None, 'display_name': None, 'mime_type': None}),
 'FunctionResponseFileData': ('forbid', True, {'display_name': None, 'file_uri': None, 'mime_type': None}),
 'FunctionResponsePart': ('forbid',
                          True,
                          {'file_data': 'FunctionResponseFileData',
                           'inline_data': 'FunctionResponseBlob',
                           'media_processing': None}),
 'GenerateContentResponseUsageMetadata': ('forbid',
                                          True,
                                          {'cache_tokens_details': ('list', 'ModalityTokenCount'),
                                           'cached_content_token_count': None,
                                           'candidates_token_count': None,
                                           'candidates_tokens_details': ('list', 'ModalityTokenCount'),
                                           'prompt_token_count': None,
                                           'prompt_tokens_details': ('list', 'ModalityTokenCount'),
                                           'thoughts_token_count': None,
                                           'tool_use_prompt_token_count': None,
                                           'tool_use_prompt_tokens_details': ('list', 'ModalityTokenCount'),
                                           'total_token_count': None,
                                           'traffic_type': None}),
 'GoogleTypeDate': ('forbid', True, {'day': None, 'month': None, 'year': None}),
 'GroundingChunk': ('forbid',
                    True,
                    {'image': 'GroundingChunkImage',
                     'maps': 'GroundingChunkMaps',
                     'retrieved_context': 'GroundingChunkRetrievedContext',
                     'web': 'GroundingChunkWeb'}),
 'GroundingChunkCustomMetadata': ('forbid',
                                  True,
                                  {'key': None,
                                   'numeric_value': None,
                                   'string_list_value': 'GroundingChunkStringList',
                                   'string_value': None}),
 'GroundingChunkImage': ('forbid', True, {'domain': None, 'image_uri': None, 'source_uri': None, 'title': None}),
 'GroundingChunkMaps': ('forbid',
                        True,
                        {'place_answer_sources': 'GroundingChunkMapsPlaceAnswerSources',
                         'place_id': None,
                         'route': 'GroundingChunkMapsRoute',
                         'text': None,
                         'title': None,
                         'uri': None}),
 'GroundingChunkMapsPlaceAnswerSources': ('forbid',
                                          True,
                                          {'flag_content_uri': None,
                                           'review_snippet': ('list',
                                                              'GroundingChunkMapsPlaceAnswerSourcesReviewSnippet'),
                                           'review_snippets': ('list',
                                                               'GroundingChunkMapsPlaceAnswerSourcesReviewSnippet')}),
 'GroundingChunkMapsPlaceAnswerSourcesAuthorAttribution': ('forbid',
                                                           True,
                                                           {'display_name': None, 'photo_uri': None, 'uri': None}),
 'GroundingChunkMapsPlaceAnswerSourcesReviewSnippet': ('forbid',
                                                       True,
                                                       {'author_attribution': 'GroundingChunkMapsPlaceAnswerSourcesAuthorAttribution',
                                                        'flag_content_uri': None,
                                                        'google_maps_uri': None,
                                                        'relative_publish_time_description': None,
                                                        'review': None,
                                                        'review_id': None,
                                                        'title': None}),
 'GroundingChunkMapsRoute': ('forbid', True, {'distance_meters': None, 'duration': None, 'encoded_polyline': None}),
 'GroundingChunkRetrievedContext': ('forbid',
                                    True,
                                    {'custom_metadata': ('list', 'GroundingChunkCustomMetadata'),
                                     'document_name': None,
                                     'file_search_store': None,
                                     'media_id': None,
                                     'page_number': None,
                                     'rag_chunk': 'RagChunk',
                                     'text': None,
                                     'title': None,
                                     'uri': None}),
 'GroundingChunkStringList': ('forbid', True, {'values': None}),
 'GroundingChunkWeb': ('forbid', True, {'domain': None, 'title': None, 'uri': None}),
 'GroundingMetadata': ('forbid',
                       True,
                       {'google_maps_widget_context_token': None,
                        'grounding_chunks': ('list', 'GroundingChunk'),
                        'grounding_supports': ('list', 'GroundingSupport'),
                        'image_search_queries': None,
                        'retrieval_metadata': 'RetrievalMetadata',
                        'retrieval_queries': None,
                        'search_entry_point': 'SearchEntryPoint',
                        'source_flagging_uris': ('list', 'GroundingMetadataSourceFlaggingUri'),
                        'web_search_queries': None}),
 'GroundingMetadataSourceFlaggingUri': ('forbid', True, {'flag_content_uri': None, 'source_id': None}),
 'GroundingSupport': ('forbid',
                      True,
                      {'confidence_scores': None,
                       'grounding_chunk_indices': None,
                       'rendered_parts': None,
                       'segment': 'Segment'}),
 'IntermediateData': ('forbid',
                      True,
                      {'intermediate_responses': ('list', ('tuple', None, ('list', 'Part'))),
                       'tool_responses': ('list', 'FunctionResponse'),
                       'tool_uses': ('list', 'FunctionCall')}),
 'Invocation': ('forbid',
                True,
                {'app_details': 'AppDetails',
                 'creation_timestamp': None,
                 'duration': None,
                 'final_response': 'Content',
                 'intermediate_data': ('union', 'IntermediateData', 'InvocationEvents'),
                 'invocation_id': None,
                 'model_duration': None,
                 'rubrics': ('list', 'Rubric'),
                 'tool_duration': None,
                 'user_content': 'Content'}),
 'InvocationEvent': ('ignore',
                     True,
                     {'author': None,
                      'content': 'Content',
                      'grounding_metadata': 'GroundingMetadata',
                      'model_version': None,
                      'usage_metadata': 'GenerateContentResponseUsageMetadata'}),
 'InvocationEvents': ('forbid', True, {'invocation_events': ('list', 'InvocationEvent')}),
 'LiveServerGoAway': ('forbid', True, {'time_left': None}),
 'LiveServerSessionResumptionUpdate': ('forbid',
                                       True,
                                       {'last_consumed_client_message_index': None,
                                        'new_handle': None,
                                        'resumable': None}),
 'LogprobsResult': ('forbid',
                    True,
                    {'chosen_candidates': ('list', 'LogprobsResultCandidate'),
                     'log_probability_sum': None,
                     'top_candidates': ('list', 'LogprobsResultTopCandidates')}),
 'LogprobsResultCandidate': ('forbid', True, {'log_probability': None, 'token': None, 'token_id': None}),
 'LogprobsResultTopCandidates': ('forbid', True, {'candidates': ('list', 'LogprobsResultCandidate')}),
 'ModalityTokenCount': ('forbid', True, {'modality': None, 'token_count': None}),
 'NodeInfo': ('ignore', True, {'message_as_output': None, 'output_for': None, 'path': None}),
 'Part': ('forbid',
          True,
          {'audio_transcription': 'Transcription',
           'code_execution_result': 'CodeExecutionResult',
           'executable_code': 'ExecutableCode',
           'file_data': 'FileData',
           'function_call': 'FunctionCall',
           'function_response': 'FunctionResponse',
           'inline_data': 'Blob',
           'media_processing': None,
           'media_resolution': 'PartMediaResolution',
           'part_metadata': None,
           'speech_metadata': 'SpeechMetadata',
           'text': None,
           'thought': None,
           'thought_signature': None,
           'tool_call': 'ToolCall',
           'tool_response': 'ToolResponse',
           'video_metadata': 'VideoMetadata'}),
 'PartMediaResolution': ('forbid', True, {'level': None, 'num_tokens': None}),
 'PartialArg': ('forbid',
                True,
                {'bool_value': None,
                 'json_path': None,
                 'null_value': None,
                 'number_value': None,
                 'string_value': None,
                 'will_continue': None}),
 'RagChunk': ('forbid', True, {'chunk_id': None, 'file_id': None, 'page_span': 'RagChunkPageSpan', 'text': None}),
 'RagChunkPageSpan': ('forbid', True, {'first_page': None, 'last_page': None}),
 'RetrievalMetadata': ('forbid', True, {'google_search_dynamic_retrieval_score': None}),
 'Rubric': ('forbid', True, {'description': None, 'rubric_content': 'RubricContent', 'rubric_id': None, 'type': None}),
 'RubricContent': ('forbid', True, {'text_property': None}),
 'RubricScore': ('forbid', True, {'rationale': None, 'rubric_id': None, 'score': None}),
 'SearchEntryPoint': ('forbid', True, {'rendered_content': None, 'sdk_blob': None}),
 'Segment': ('forbid', True, {'end_index': None, 'part_index': None, 'start_index': None, 'text': None}),
 'Session': ('forbid',
             True,
             {'app_name': None,
              'events': ('list', 'Event'),
              'id': None,
              'last_update_time': None,
              'state': None,
              'user_id': None}),
 'SessionInput': ('allow', True, {'app_name': None, 'session_id': None, 'state': None, 'user_id': None}),
 'SpeechMetadata': ('forbid', True, {'speaker': None, 'style': None}),
 'TokenUsageDetails': ('forbid',
                       True,
                       {'cached_tokens': None,
                        'candidates_tokens': None,
                        'input_tokens': None,
                        'output_tokens': None,
                        'prompt_tokens': None,
                        'reasoning_tokens': None,
                        'tool_use_tokens': None,
                        'total_tokens': None}),
 'ToolCall': ('forbid', True, {'args': None, 'id': None, 'tool_type': None}),
 'ToolConfirmation': ('forbid', True, {'confirmed': None, 'hint': None, 'payload': None}),
 'ToolResponse': ('forbid', True, {'id': None, 'response': None, 'tool_type': None}),
 'Transcription': ('forbid',
                   True,
                   {'end_offset': None,
                    'finished': None,
                    'language_code': None,
                    'speaker_label': None,
                    'start_offset': None,
                    'text': None,
                    'words': ('list', 'WordInfo')}),
 'UiWidget': ('forbid', True, {'id': None, 'payload': None, 'provider': None}),
 'UserPersona': ('ignore', True, {'behaviors': None, 'description': None, 'id': None}),
 'VideoMetadata': ('forbid', True, {'end_offset': None, 'fps': None, 'start_offset': None}),
 'VoiceActivity': ('forbid', True, {'audio_offset': None, 'voice_activity_type': None}),
 'WordInfo': ('forbid', True, {'end_offset': None, 'start_offset': None, 'word': None})}


@functools.lru_cache(maxsize=None)
def _keys(model: str) -> tuple[dict[str, Any], dict[str, tuple[str, Any]]]:
    """(alias -> field type, field name -> (its alias, field type)) of a model."""
    _, camel, fields = MODELS[model]
    aliases = {(camel_case(name) if camel else name): kind for name, kind in fields.items()}
    names = {name: (camel_case(name) if camel else name, kind) for name, kind in fields.items()}
    return aliases, names


def _fields_of(model: str, value: dict) -> tuple[dict[str, Any], list[str]]:
    """(key as given -> field type, the extra keys) of an object read as `model`."""
    aliases, names = _keys(model)
    found: dict[str, Any] = {}
    extra = []
    for key in value:
        if key in aliases:
            found[key] = aliases[key]
        elif key in names and names[key][0] not in value:
            found[key] = names[key][1]
        else:
            extra.append(key)
    return found, extra


def _errors(value: Any, kind: Any, path: str) -> Iterator[str]:
    """The paths of the forbidden keys in `value` read as type `kind`, in document order."""
    if kind is None:
        return
    if isinstance(kind, str):
        if not isinstance(value, dict):
            return  # a wrong type is not a key question; the reader reports it where it reads the value
        found, extra = _fields_of(kind, value)
        policy = MODELS[kind][0]
        for key, item in value.items():
            if key in found:
                yield from _errors(item, found[key], f"{path}.{key}" if path else key)
            elif policy == "forbid":
                yield f"{path}.{key}" if path else key
        return
    shape, *members = kind
    if shape == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            yield from _errors(item, members[0], f"{path}[{i}]")
    elif shape == "dict" and isinstance(value, dict):
        for key, item in value.items():
            yield from _errors(item, members[0], f"{path}.{key}")
    elif shape == "tuple" and isinstance(value, list):
        for i, (item, member) in enumerate(zip(value, members)):
            yield from _errors(item, member, f"{path}[{i}]")
    elif shape == "union":
        # pydantic's smart union: the value is accepted when one member accepts it;
        # else every member's errors are ADK's, reported here as the first member's
        tried = [list(_errors(value, member, path)) for member in members]
        if all(tried):
            yield from tried[0]


def forbidden_keys(document: Any, model: str = "EvalSet") -> list[str]:
    """The paths of the keys ADK's models forbid in an EvalSet document (or an EvalSetResult's:
    model="EvalSetResult"), e.g. `eval_cases[0].conversation[1].final_respone`, in document order."""
    return list(_errors(document, model, ""))


# ADK's SessionInput (eval_case.py; extra="allow", camelCase aliases): field -> (required, type name, Python type)
_SESSION_INPUT = {"app_name": (True, "string", str), "user_id": (True, "string", str),
                  "session_id": (False, "string", (str, type(None))), "state": (False, "dictionary", dict)}


def session_input_errors(eval_set: Any) -> list[tuple[str, str]]:
    """(path, pydantic's message) for each case's session_input ADK's SessionInput refuses, which
    refuses the whole eval set as a forbidden key does: not an object, app_name or user_id
    missing or not a string, session_id not a string, state not an object. (JSON gives
    nothing pydantic's lax mode would coerce to these: it makes no string of a number.)"""
    out: list[tuple[str, str]] = []
    cases = eval_set.get("eval_cases") if isinstance(eval_set, dict) else None
    for index, case in enumerate(cases if isinstance(cases, list) else []):
        if not isinstance(case, dict):
            continue
        # given in both spellings, the camelCase one is the field (as forbidden_keys: pydantic's choice)
        key = "sessionInput" if "sessionInput" in case else "session_input"
        value = case.get(key)
        where = f"eval_cases[{index}].{key}"
        if value is None:
            continue
        if not isinstance(value, dict):
            out.append((where, "Input should be a valid dictionary or instance of SessionInput"))
            continue
        for field, (required, name, kind) in _SESSION_INPUT.items():
            spelled = camel_case(field) if camel_case(field) in value else field
            if spelled not in value:
                if required:
                    out.append((f"{where}.{field}", "Field required"))
            elif isinstance(value[spelled], bool) or not isinstance(value[spelled], kind):
                out.append((f"{where}.{spelled}", f"Input should be a valid {name}"))
    return out
