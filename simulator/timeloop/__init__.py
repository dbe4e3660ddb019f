"""Interop with Timeloop and Accelergy: a configuration's Einsums as their input files
(`export`), their problem and mapping files read back into the access model (`problems`),
and `timeloop-model` run on the exports and compared with this model (`backend`).
The architecture importer is a spec reader (:mod:`simulator.spec.timeloop_import`)."""
