-- Argo CD health check for objects that carry the kstatus trio (Ready,
-- Reconciling, Stalled) and status.observedGeneration, such as WatchTarget.
-- It says what kstatus says, in Argo CD's words:
--   kstatus Current     -> Healthy
--   kstatus InProgress  -> Progressing
--   kstatus Failed      -> Degraded    (Stalled=True: a human must act)
--   kstatus Terminating -> Progressing (deletion pending)
-- and, for kinds with a spec.suspend field (Flux's convention; kstatus has
-- no such state), Suspended while it is true.
-- Nothing here is specific to WatchTarget: register the same script for
-- any group and kind that follows kstatus. It uses only Lua's base
-- library, which is all Argo CD opens for a customised health check.
local hs = {}

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Pending deletion"
  return hs
end

if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
  hs.message = "Suspended: spec.suspend is true"
  return hs
end

local status = obj.status or {}
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. generation ..
    " (observed " .. status.observedGeneration .. ")"
  return hs
end

local function describe(c)
  local text = c.type
  if c.reason ~= nil and c.reason ~= "" then
    text = text .. " (" .. c.reason .. ")"
  end
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

-- Like kstatus, the first of Reconciling=True and Stalled=True in list
-- order decides.
local conditions = status.conditions or {}
for _, c in ipairs(conditions) do
  if c.type == "Reconciling" and c.status == "True" then
    hs.status = "Progressing"
    hs.message = describe(c)
    return hs
  end
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = describe(c)
    return hs
  end
end

for _, c in ipairs(conditions) do
  if c.type == "Ready" then
    if c.status == "True" then
      hs.status = "Healthy"
    else
      -- False or Unknown: not yet, or not now; Stalled says when it is
      -- a human's turn.
      hs.status = "Progressing"
    end
    hs.message = describe(c)
    return hs
  end
end

-- No condition kstatus reads: kstatus calls such an object Current.
hs.status = "Healthy"
hs.message = "No Ready, Reconciling or Stalled condition"
return hs
