-- Argo CD health of a towline.dev WorkflowRun: its phase.
local phase = "Pending"
if obj.status ~= nil and obj.status.phase ~= nil then
  phase = obj.status.phase
end
local message = phase
if obj.status ~= nil and obj.status.message ~= nil then
  message = obj.status.message
end
if phase == "Succeeded" then
  return {status = "Healthy", message = message}
elseif phase == "Failed" or phase == "Cancelled" then
  return {status = "Degraded", message = message}
elseif phase == "AwaitingApproval" then
  local step = ""
  if obj.status.currentStep ~= nil then
    step = " (" .. obj.status.currentStep .. ")"
  end
  return {status = "Suspended", message = "Waiting for an approval" .. step}
elseif obj.spec ~= nil and obj.spec.suspend == true then
  return {status = "Suspended", message = "Suspended (spec.suspend): no new step starts"}
end
return {status = "Progressing", message = message}
