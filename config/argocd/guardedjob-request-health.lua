-- Argo CD health of a request (GuardedJobRun, GuardedJobBackfill, GuardedJobInspect,
-- GuardedJobUnlock; batch.guardedjob.dev/v1alpha1), for requests kept in Git (as
-- sync hooks).
--
-- Progressing until the manager has answered and while the run or backfill is in
-- flight; Healthy once it succeeded (a run that found its occurrence done already,
-- Skipped, succeeded elsewhere), a backfill was cancelled by a person, the store was
-- read, or a key was deleted (or was gone already); Degraded when it was refused,
-- its run ended otherwise (Failed, Busy, LockLost, ...), an occurrence of the
-- backfill failed, the store could not be read, or an unlock deleted nothing
-- because the key changed hands or the store did not answer: someone should look.
local hs = {}
local st = obj.status
if st == nil or st.phase == nil or st.phase == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the manager"
  return hs
end
local what = st.phase
if st.result ~= nil and st.result ~= "" then
  what = what .. " (" .. st.result .. ")"
end
if st.message ~= nil and st.message ~= "" then
  what = what .. ": " .. st.message
end
hs.message = what
if st.phase == "Pending" or st.phase == "Running" then
  hs.status = "Progressing"
elseif st.phase == "Refused" then
  hs.status = "Degraded"
elseif st.phase == "Cancelled" then
  hs.status = "Healthy"
elseif obj.kind == "GuardedJobRun" then
  if st.result == "Succeeded" or st.result == "Skipped" then
    hs.status = "Healthy"
  else
    hs.status = "Degraded"
  end
elseif obj.kind == "GuardedJobUnlock" then
  if st.result == "Deleted" or st.result == "Absent" then
    hs.status = "Healthy"
  else
    hs.status = "Degraded"
  end
elseif obj.kind == "GuardedJobInspect" then
  if st.view ~= nil and st.view.error ~= nil and st.view.error ~= "" then
    hs.status = "Degraded"
  else
    hs.status = "Healthy"
  end
elseif st.failed ~= nil and st.failed > 0 then
  hs.status = "Degraded"
else
  hs.status = "Healthy"
end
return hs
