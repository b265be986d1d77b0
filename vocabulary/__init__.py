"""The ground floor: the names every layer of the project shares, and nothing else.

`names` (schemes, collectives, algorithms, protocols, kernel kinds and their bytes, step
choices), `units` (byte sizes and durations as people write them) and `errors` (what a user
can cause). These modules import nothing of the project but each other; profiles, the plan
contract, the simulator, the runtime, calibration, reports and the CLI all import them
(tests/test_architecture.py holds every arrow to that). This file imports nothing, so that
`import vocabulary.names` costs only that module.
"""
