-- Argo CD health of a GuardedJob (batch.guardedjob.dev/v1alpha1).
--
-- It agrees with kstatus (what Flux computes): Degraded only
-- when a person must act (Stalled=True), Progressing while the manager has not
-- reconciled the latest spec or waits for something that clears by itself (a
-- store Secret not applied yet), Healthy otherwise. A run in progress, a busy
-- lock or an unreachable store are normal operation: they are shown in the
-- message but never hold up a sync wave. A suspended GuardedJob (spec.suspend, or
-- a pause in status.pause, once the manager has reconciled it) is Suspended, as Argo CD's own CronJob
-- check says of a suspended CronJob, unless its spec needs fixing (Degraded).
local hs = {}

local function conditions(status)
  local byType = {}
  if status.conditions ~= nil then
    for _, c in ipairs(status.conditions) do
      byType[c.type] = c
    end
  end
  return byType
end

local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

if obj.status == nil or obj.status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the manager to reconcile the GuardedJob"
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the manager to reconcile generation " .. tostring(obj.metadata.generation) ..
    " (observed: " .. tostring(obj.status.observedGeneration) .. ")"
  return hs
end

local c = conditions(obj.status)
if c.Stalled ~= nil and c.Stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(c.Stalled)
  return hs
end
-- status.suspended is the manager's answer (spec.suspend within its note's
-- until, or a pause in status); an object it has not written yet falls back
-- to spec.suspend.
local suspended = obj.status.suspended
if suspended == nil then
  suspended = obj.spec ~= nil and obj.spec.suspend == true
end
if suspended == true then
  hs.status = "Suspended"
  if c.Ready ~= nil and c.Ready.reason == "Suspended" then
    hs.message = c.Ready.message or "suspended: no new runs are scheduled"
  elseif c.Ready ~= nil then
    hs.message = "suspended; " .. describe(c.Ready)
  else
    hs.message = "suspended: no new runs are scheduled"
  end
  -- Suspending stops new runs only: one in progress goes on.
  if c.LockHeld ~= nil and c.LockHeld.status == "True" then
    hs.message = hs.message .. "; a run goes on: " .. (c.LockHeld.message or "a run holds the lock")
  end
  return hs
end
if c.Reconciling ~= nil and c.Reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(c.Reconciling)
  return hs
end
if c.Ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end
if c.Ready.status ~= "True" then
  hs.status = "Progressing"
  hs.message = describe(c.Ready)
  return hs
end

hs.status = "Healthy"
hs.message = c.Ready.message or c.Ready.reason
if c.StoreReachable ~= nil and c.StoreReachable.status == "False" then
  hs.message = hs.message .. "; the lock store is unreachable: " .. (c.StoreReachable.message or "")
end
if c.LockHeld ~= nil and c.LockHeld.status == "True" then
  hs.message = hs.message .. "; " .. (c.LockHeld.message or "a run holds the lock")
end
return hs
