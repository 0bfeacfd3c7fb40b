"""evalbeam's Beam pieces: read, validate, score, summarize, write."""
from evalbeam.transforms.local_cloud import route_beam_to_emulators

route_beam_to_emulators()
