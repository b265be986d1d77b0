"""Questions over many steps: compare, plan and the planner's search
(DESIGN section 10; ../shared/simulator-layout.md)."""
