-- Argo CD health of a towline.dev Approval: open, decided, or expired.
local phase = "Pending"
if obj.status ~= nil and obj.status.phase ~= nil then
  phase = obj.status.phase
end
local by = ""
if obj.spec ~= nil and obj.spec.decidedBy ~= nil then
  by = " by " .. obj.spec.decidedBy
end
if phase == "Approved" then
  return {status = "Healthy", message = "Approved" .. by}
elseif phase == "Rejected" then
  local reason = ""
  if obj.spec.reason ~= nil then
    reason = ": " .. obj.spec.reason
  end
  return {status = "Degraded", message = "Rejected" .. by .. reason}
elseif phase == "Expired" or phase == "Cancelled" then
  return {status = "Degraded", message = phase}
end
return {status = "Suspended", message = "Waiting for a decision"}
