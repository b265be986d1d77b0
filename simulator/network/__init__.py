"""Links, flows, NCCL's choices, collectives and their fit
(DESIGN section 10; ../shared/simulator-layout.md)."""
